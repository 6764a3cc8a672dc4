package tests

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/syncbuf"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/router"
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

// secStartTLS starts a redis-server in dir serving TLS (secTLSArgs) on a
// free port and returns it and that port. The TLS port is picked free and
// then bound by redis-server, so another process may take it in between:
// a start refused for a port in use is retried with another, 5 attempts
// in all, as redisproc retries the plain port it picks (a CI run failed
// once on it; in the probe it would have skipped every TLS test).
func secStartTLS(t testing.TB, dir string, srv secPair, ca *secCA, mutual bool) (*redisproc.Server, int, error) {
	for attempt := 1; ; attempt++ {
		port := redistest.FreePort(t)
		s, err := redisproc.Start(redisproc.Options{Dir: dir, Args: secTLSArgs(port, srv, ca, mutual), KillWithParent: true})
		if err == nil || !redisproc.IsAddrInUse(err) || attempt == 5 {
			return s, port, err
		}
	}
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
	srv, port, err := secStartTLS(t, dir, pair, ca, false)
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

// The helpers below are shared by hostile_test.go and security_test.go.

// secLogger returns a debug-level JSON logger writing into a new buffer.
func secLogger() (*slog.Logger, *syncbuf.Buffer) {
	buf := &syncbuf.Buffer{}
	return slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// hostileRing is the order home ring the inventory builds over nodes of
// weight 1 (names sorted): the home of every made-up order id (the hostile
// tests mint none).
func hostileRing(t testing.TB, names []string) *router.Ring {
	t.Helper()
	names = append([]string(nil), names...)
	sort.Strings(names)
	ms := make([]router.Member, len(names))
	for i, name := range names {
		ms[i] = router.Member{Name: name, Weight: 1}
	}
	ring, err := router.NewRing(ms)
	if err != nil {
		t.Fatal(err)
	}
	return ring
}

// hostileInvariant checks, for every node of route r except the down
// ones (which must be unreachable), that available + reserved +
// confirmed == loaded and nothing is negative, and that the reachable
// nodes hold loaded units in all.
func hostileInvariant(t testing.TB, inv *inventory.Inventory, sku string, loaded int64, down ...string) inventory.StockLevel {
	t.Helper()
	return hostileInvariantOn(t, inv, "r", sku, loaded, down...)
}

// hostileInvariantOn is hostileInvariant for route's sku.
func hostileInvariantOn(t testing.TB, inv *inventory.Inventory, route, sku string, loaded int64, down ...string) inventory.StockLevel {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lvl, err := inv.GetStock(ctx, route, sku)
	if err != nil {
		t.Fatalf("invariant %s: GetStock: %v", sku, err)
	}
	for _, ns := range lvl.Nodes {
		isDown := false
		for _, d := range down {
			isDown = isDown || d == ns.Node
		}
		switch {
		case isDown && ns.Reachable:
			t.Errorf("invariant %s: node %s is reachable, want down", sku, ns.Node)
		case !isDown && !ns.Reachable:
			t.Errorf("invariant %s: node %s unreachable: %v", sku, ns.Node, ns.Err)
		case ns.Available < 0 || ns.Reserved < 0 || ns.Confirmed < 0:
			t.Errorf("invariant %s: node %s has a negative counter: %+v", sku, ns.Node, ns)
		case ns.Available+ns.Reserved+ns.Confirmed != ns.Loaded:
			t.Errorf("invariant %s: node %s: %d+%d+%d != loaded %d", sku, ns.Node, ns.Available, ns.Reserved, ns.Confirmed, ns.Loaded)
		}
	}
	if lvl.Loaded != loaded || lvl.Available+lvl.Reserved+lvl.Confirmed != loaded {
		t.Errorf("invariant %s: %+v, want %d loaded and accounted for", sku, lvl, loaded)
	}
	if t.Failed() {
		t.FailNow()
	}
	return lvl
}

// hostileCounters returns node c's counters of sku (route r, or "route:sku"), a missing
// field as 0, a read error as its text.
func hostileCounters(c *redis.Client, sku string) string {
	if !strings.Contains(sku, ":") {
		sku = "r:" + sku // route r unless named
	}
	v, err := c.HMGet(context.Background(), "inv:stock:"+sku, "available", "reserved", "confirmed", "loaded").Result()
	if err != nil {
		return err.Error()
	}
	for i := range v {
		if v[i] == nil {
			v[i] = "0"
		}
	}
	return fmt.Sprint(v...)
}

// hostileWantErr fails the test unless err wraps target and mentions every
// fragment.
func hostileWantErr(t testing.TB, what string, err, target error, fragments ...string) {
	t.Helper()
	if err == nil || (target != nil && !errors.Is(err, target)) {
		t.Fatalf("%s: err = %v, want %v", what, err, target)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("%s: err = %q, want it to mention %q", what, err, f)
		}
	}
	t.Logf("%s: %v", what, err)
}

// hostileFake listens on a loopback port and answers like no Redis does:
// "http" replies a 400 and closes, "silent" reads and never answers,
// "liar" answers +OK to everything. It returns the address.
func hostileFake(t testing.TB, mode string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn // guarded by mu
	closed := false      // guarded by mu
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		closed = true
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				c.Close()
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
					switch mode {
					case "http":
						io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
						return
					case "liar":
						io.WriteString(c, "+OK\r\n")
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// hostileSnap returns every node's counters of the SKUs and the size of
// its pending-part index.
func hostileSnap(direct map[string]*redis.Client, skus ...string) map[string]string {
	out := map[string]string{}
	for name, c := range direct {
		for _, sku := range skus {
			out[name] += hostileCounters(c, sku) + " "
		}
		out[name] += fmt.Sprint(c.ZCard(context.Background(), "inv:pending").Val())
	}
	return out
}
