package tests

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/redistest"
)

// secServerName is the DNS name in every server certificate the tests
// issue (besides 127.0.0.1 and localhost).
const secServerName = "redis.shardis.test"

// secCA is a throwaway certificate authority made by a test.
type secCA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	CertPEM []byte
	File    string // CertPEM written to disk
}

// secNewCA makes a CA named cn and writes its certificate into dir.
func secNewCA(t testing.TB, dir, cn string) *secCA {
	t.Helper()
	key := secKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          secSerial(t),
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"shardis tests"}},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("CA %s: %v", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &secCA{cert: cert, key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
	ca.File = secWrite(t, dir, cn+"-ca.pem", ca.CertPEM)
	return ca
}

// secPair is a certificate and key on disk, and loaded.
type secPair struct {
	CertFile, KeyFile string
	TLS               tls.Certificate
}

// issue makes a leaf certificate signed by ca: a server certificate for
// 127.0.0.1, localhost and secServerName when server is true, else a
// client certificate. Both files are written into dir.
func (ca *secCA) issue(t testing.TB, dir, cn string, server bool) secPair {
	t.Helper()
	key := secKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: secSerial(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.DNSNames = []string{secServerName, "localhost"}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatalf("certificate %s: %v", cn, err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return secPair{
		CertFile: secWrite(t, dir, cn+".pem", certPEM),
		KeyFile:  secWrite(t, dir, cn+"-key.pem", keyPEM),
		TLS:      pair,
	}
}

// pool returns a cert pool holding only ca.
func (ca *secCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

func secKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func secSerial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func secWrite(t testing.TB, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// secTLSArgs are the redis-server arguments serving TLS on tlsPort with
// srv as its certificate and ca as the CA of client certificates (asked
// for only when mutual). The plain port stays open for the harness's
// readiness check and the test's direct client.
func secTLSArgs(tlsPort int, srv secPair, ca *secCA, mutual bool) []string {
	auth := "no"
	if mutual {
		auth = "yes"
	}
	return []string{"--tls-port", strconv.Itoa(tlsPort), "--tls-cert-file", srv.CertFile,
		"--tls-key-file", srv.KeyFile, "--tls-ca-cert-file", ca.File, "--tls-auth-clients", auth}
}

var (
	secTLSOnce sync.Once
	secTLSErr  error // why this redis-server cannot serve TLS; nil if it can
)

// secRequireRedisTLS skips the test unless redis-server can serve TLS
// (built with BUILD_TLS=yes). It checks once per test binary: it starts a
// server with a TLS port and completes a TLS handshake with PING.
func secRequireRedisTLS(t testing.TB) {
	t.Helper()
	secTLSOnce.Do(func() { secTLSErr = secProbeRedisTLS(t) })
	if secTLSErr != nil {
		t.Skipf("SKIP: this redis-server cannot serve TLS (built without BUILD_TLS?): %v", secTLSErr)
	}
}

func secProbeRedisTLS(t testing.TB) error {
	dir, err := os.MkdirTemp("", "shardis-tlsprobe-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ca := secNewCA(t, dir, "probe")
	pair := ca.issue(t, dir, "probe-server", true)
	port := redistest.FreePort(t)
	srv, err := redisproc.Start(redisproc.Options{Dir: dir, Args: secTLSArgs(port, pair, ca, false), KillWithParent: true})
	if err != nil {
		return err
	}
	defer func() { _ = srv.Kill(); _ = srv.Close() }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 2 * time.Second}, "tcp", addr,
		&tls.Config{RootCAs: ca.pool(), ServerName: secServerName})
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	buf := make([]byte, 7)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return err
	}
	if !bytes.Equal(buf, []byte("+PONG\r\n")) {
		return fmt.Errorf("PING over TLS answered %q", buf)
	}
	return nil
}

// secBuffer is a bytes.Buffer safe for concurrent writes and reads: the
// sink of a captured slog handler.
type secBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *secBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *secBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// secLogger returns a debug-level JSON logger writing into a new buffer.
func secLogger() (*slog.Logger, *secBuffer) {
	buf := &secBuffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}
