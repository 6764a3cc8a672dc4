package service

import (
	"bytes"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// config.Service.MaxBodyBytes: "the largest request body accepted; larger
// ones are refused with resource_exhausted", on every procedure of the
// service port, grpc.health.v1 and reflection included (unauthenticated,
// like every probe). Before, the front door checked the limit only under
// /shardis.v1. and the health and reflection handlers had no limit of
// their own: a health Check read and decoded a body of any size (2 MiB
// over a 1 MiB limit was answered SERVING).
func TestProbesHonourBodyLimit(t *testing.T) {
	s, _, _ := startOverNodes(t, 0)
	max := s.cfg.Service.MaxBodyBytes
	// a message with unknown field 99 of 2*max bytes (binary protobuf
	// keeps unknown fields and ignores them): a HealthCheckRequest for
	// service "", or a reflection request with no question
	msg := protowire.AppendTag(nil, 99, protowire.BytesType)
	msg = protowire.AppendBytes(msg, bytes.Repeat([]byte{'x'}, 2*max))
	envelope := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	enveloped := append(envelope, msg...)
	h2c := new(http.Protocols)
	h2c.SetUnencryptedHTTP2(true)
	for _, c := range []struct {
		name, path, ctype string
		body              []byte
		chunked           bool // no Content-Length: the handler's own limit answers
		h2c               bool // HTTP/2 cleartext (a bidirectional stream needs it)
	}{
		{"health Check, Connect", "/grpc.health.v1.Health/Check", "application/proto", msg, false, false},
		{"health Check, Connect, chunked", "/grpc.health.v1.Health/Check", "application/proto", msg, true, false},
		{"health Check, gRPC-Web, chunked", "/grpc.health.v1.Health/Check", "application/grpc-web+proto", enveloped, true, false},
		{"health Check, gRPC", "/grpc.health.v1.Health/Check", "application/grpc", enveloped, true, true},
		{"reflection v1, gRPC", "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", "application/grpc", enveloped, true, true},
		{"reflection v1alpha, gRPC-Web", "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", "application/grpc-web+proto", enveloped, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader = bytes.NewReader(c.body)
			if c.chunked {
				body = io.MultiReader(body) // not a *bytes.Reader: sent without Content-Length
			}
			req, err := http.NewRequest(http.MethodPost, "http://"+s.Addr()+c.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", c.ctype)
			client := http.DefaultClient
			if c.h2c {
				req.Header.Set("Te", "trailers")
				client = &http.Client{Transport: &http.Transport{Protocols: h2c}}
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			// Connect: {"code":"resource_exhausted",...}; gRPC: grpc-status
			// 8 in the headers or the trailers; gRPC-Web: in the headers
			// or the trailers in the body
			if !strings.Contains(string(out), "resource_exhausted") && resp.Header.Get("Grpc-Status") != "8" &&
				resp.Trailer.Get("Grpc-Status") != "8" && !strings.Contains(string(out), "grpc-status:8") {
				t.Errorf("%d-byte body (limit %d): HTTP %d, grpc-status %q (trailer %q), body %.200q; want resource_exhausted",
					len(c.body), max, resp.StatusCode, resp.Header.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Status"), out)
			}
		})
	}
}
