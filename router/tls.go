package router

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"

	"github.com/shardis/shardis/config"
)

// nodeTLS builds the TLS configuration of a node, or nil when TLS is off.
func nodeTLS(name string, n config.Node) (*tls.Config, error) {
	t := n.TLS
	if !t.On() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(n.Addr)
		cfg.ServerName = host
	}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("nodes.%s.tls.ca_file: %w", name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("nodes.%s.tls.ca_file %s: no PEM certificate found", name, t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("nodes.%s.tls: client certificate: %w", name, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
