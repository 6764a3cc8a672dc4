package service

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Strict codecs: a request carrying a field the API does not define is
// refused with invalid_argument naming the field, as the configuration
// refuses unknown keys. connect-go's own codecs drop unknown fields
// silently, so a misspelt "user" for "userId" would reserve an order
// without a user.

// strictJSON is the "json" codec (Connect and gRPC-Web JSON).
type strictJSON struct{}

func (strictJSON) Name() string { return "json" }

func (strictJSON) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(msg)
}

func (strictJSON) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(b) == 0 { // an empty body is an empty message, as with connect's own codec
		return nil
	}
	// protojson's error names the field: `unknown field "user"`.
	return protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(b, msg)
}

// strictProto is the "proto" codec (binary Connect, gRPC, gRPC-Web).
type strictProto struct{}

func (strictProto) Name() string { return "proto" }

func (strictProto) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(msg)
}

func (strictProto) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if err := proto.Unmarshal(b, msg); err != nil {
		return err
	}
	return unknownFields(msg.ProtoReflect(), "")
}

// unknownFields reports the first field number in m (or a message inside
// it) that the message type does not define.
func unknownFields(m protoreflect.Message, path string) error {
	if raw := m.GetUnknown(); len(raw) > 0 {
		num, _, _ := protowire.ConsumeTag(raw)
		return fmt.Errorf("unknown field number %d in %s%s", num, m.Descriptor().Name(), path)
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Kind() != protoreflect.MessageKind && fd.Kind() != protoreflect.GroupKind {
			return true
		}
		switch {
		case fd.IsList():
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = unknownFields(l.Get(i).Message(), fmt.Sprintf("%s.%s[%d]", path, fd.Name(), i))
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapValue().Kind() == protoreflect.MessageKind {
					err = unknownFields(mv.Message(), path+"."+string(fd.Name()))
				}
				return err == nil
			})
		default:
			err = unknownFields(v.Message(), path+"."+string(fd.Name()))
		}
		return err == nil
	})
	return err
}
