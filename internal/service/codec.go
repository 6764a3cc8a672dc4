package service

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The codecs follow protobuf's compatibility rules per encoding:
//
//   - JSON is strict: a request naming a field the API does not define is
//     refused with invalid_argument naming the field, as the configuration
//     refuses unknown keys. JSON is what people type (curl), and a misspelt
//     "user" for "userId" must not reserve an order without a user.
//     connect-go's own JSON codec drops unknown fields silently, and it
//     serves "application/json; charset=utf-8" (any case of the charset)
//     under a codec name of its own, so strictJSON is registered under
//     both names (strictJSONCharset): before, a request sent with the
//     charset parameter had its unknown fields dropped.
//   - Binary protobuf accepts unknown fields: a client built from a newer
//     .proto adds a field, and an older server still serves it (the field
//     is ignored), as every protobuf runtime does. Binary requests come
//     from generated code, never from a typo.

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

// strictJSONCharset is strictJSON under the name connect-go gives
// "application/json; charset=utf-8" (Connect's unary JSON with the
// charset parameter, which it canonicalizes to lower case).
type strictJSONCharset struct{ strictJSON }

func (strictJSONCharset) Name() string { return "json; charset=utf-8" }

// binaryProto is the "proto" codec (binary Connect, gRPC, gRPC-Web): plain
// protobuf, unknown fields kept in the message and ignored.
type binaryProto struct{}

func (binaryProto) Name() string { return "proto" }

func (binaryProto) Marshal(m any) ([]byte, error) {
	msg, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Marshal(msg)
}

func (binaryProto) Unmarshal(b []byte, m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	return proto.Unmarshal(b, msg)
}
