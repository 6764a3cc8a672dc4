package router_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

// TestNodeTLSErrorNamesTheFiles: a client certificate that does not load
// is named by the error, with its setting. tls.LoadX509KeyPair's error
// for a file without PEM named no file (found by a review).
func TestNodeTLSErrorNamesTheFiles(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "client-cert.pem")
	key := filepath.Join(dir, "client-key.pem")
	for _, f := range []string{cert, key} {
		if err := os.WriteFile(f, []byte("not a PEM file\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := router.NodeTLS("n1", config.Node{Addr: "127.0.0.1:6379", TLS: config.NodeTLS{CertFile: cert, KeyFile: key}})
	if err == nil {
		t.Fatal("NodeTLS accepted a certificate that is not PEM")
	}
	t.Logf("NodeTLS: %v", err)
	if !strings.Contains(err.Error(), "nodes.n1.tls") || !strings.Contains(err.Error(), cert) {
		t.Errorf("NodeTLS error %q: want it to name the setting nodes.n1.tls and the file %s", err, cert)
	}
}
