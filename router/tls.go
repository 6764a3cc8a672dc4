package router

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"github.com/shardis/shardis/config"
)

// NodeTLS builds the TLS configuration the router dials node name (n, its
// configuration) with, or nil when TLS is off; programs that dial a node
// themselves (the drills) use it to dial it the same way. A Sentinel
// node's comes from sentinel.tls and serves the sentinels and the group's
// data nodes alike; its server name, unless set, is the host of each
// address dialed (crypto/tls fills it in per connection). A standalone
// node's server name, unless set, is the host of its addr. Its errors
// name the setting (nodes.NAME.tls…) and the file that does not load.
func NodeTLS(name string, n config.Node) (*tls.Config, error) {
	t, path := n.TLS, "nodes."+name+".tls"
	if n.Sentinel.On() {
		t, path = n.Sentinel.TLS, "nodes."+name+".sentinel.tls"
	}
	if !t.On() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if cfg.ServerName == "" && !n.Sentinel.On() {
		host, _, _ := net.SplitHostPort(n.Addr)
		cfg.ServerName = host
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%s.ca_file: %w", path, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.ca_file %s: no PEM certificate found", path, t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		// each file read on its own: tls.LoadX509KeyPair's errors for a
		// file without PEM, or a key that does not match, name neither
		certPEM, err := os.ReadFile(t.CertFile)
		if err != nil {
			return nil, fmt.Errorf("%s.cert_file: %w", path, err)
		}
		keyPEM, err := os.ReadFile(t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s.key_file: %w", path, err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s: client certificate %s with key %s: %w", path, t.CertFile, t.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
