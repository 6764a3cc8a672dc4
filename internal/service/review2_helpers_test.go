package service

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net/http"
	url2 "net/url"
	"strconv"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// review2H2C is an HTTP/2 client over cleartext with prior knowledge, as
// gRPC clients reach the plain port (and the gRPC port).
func review2H2C(t *testing.T) *http.Client {
	t.Helper()
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// review2Post posts body to url with the Content-Type and headers given
// and returns the HTTP status and the body of the answer.
func review2Post(ctx context.Context, t *testing.T, url, ctype string, hdr map[string]string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// metadataAuthed is ctx carrying the bearer token of startGRPCService.
func metadataAuthed(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer s3cret")
}

// review2GRPC sends msg as one gRPC call over h2c (Content-Type
// application/grpc, no client-side timer) with the headers given and
// returns the grpc-status and grpc-message the server answered, or the
// error of a call the server cut short (a stream reset).
func review2GRPC(ctx context.Context, t *testing.T, hc *http.Client, url string, hdr map[string]string, msg proto.Message) (codes.Code, string, error) {
	t.Helper()
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	body := append([]byte{0, 0, 0, 0, 0}, b...)
	binary.BigEndian.PutUint32(body[1:5], uint32(len(b)))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	if _, err := io.Copy(io.Discard, res.Body); err != nil {
		return 0, "", err
	}
	st, m := res.Trailer.Get("Grpc-Status"), res.Trailer.Get("Grpc-Message")
	if st == "" { // trailers-only
		st, m = res.Header.Get("Grpc-Status"), res.Header.Get("Grpc-Message")
	}
	n, err := strconv.Atoi(st)
	if err != nil {
		t.Fatalf("%s: HTTP %d, no grpc-status", url, res.StatusCode)
	}
	if u, err := url2.PathUnescape(m); err == nil {
		m = u
	}
	return codes.Code(n), m, nil
}
