package tests

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redisproc"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/internal/service"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// secACLArgs define ACL user name with password pw on a redis-server.
func secACLArgs(name, pw string) []string {
	return []string{"--user", name, "on", ">" + pw, "~*", "&*", "+@all"}
}

// TestAuthNodeCredentials: requirepass and ACL users work; wrong or missing
// credentials make the node DOWN with a reason naming it and the refusal
// (WRONGPASS, NOAUTH), never the password; the other nodes serve.
func TestAuthNodeCredentials(t *testing.T) {
	t.Parallel()
	const pw, aclPW, wrongPW = "pw-requirepass-1b7e", "pw-acl-alice-4c2d", "pw-wrong-9f0a"
	nodes := map[string]config.Node{}
	var acl *redistest.Server
	_, nodes["pass"] = hostileRedis(t, redistest.Options{Password: pw})
	acl, nodes["acl"] = hostileRedis(t, redistest.Options{Args: secACLArgs("alice", aclPW)})
	_, nodes["wrongpass"] = hostileRedis(t, redistest.Options{Password: pw})
	_, nodes["nopass"] = hostileRedis(t, redistest.Options{Password: pw})
	_, nodes["wrongacl"] = hostileRedis(t, redistest.Options{Args: secACLArgs("alice", aclPW)})
	_, nodes["nouser"] = hostileRedis(t, redistest.Options{Args: secACLArgs("alice", aclPW)})
	set := func(name, user, pass string) {
		n := nodes[name]
		n.Username, n.Password = user, pass
		nodes[name] = n
	}
	set("pass", "", pw)
	set("acl", "alice", aclPW)
	set("wrongpass", "", wrongPW)
	set("wrongacl", "alice", wrongPW)
	set("nouser", "bob", aclPW)
	e := hostileStart(t, nodes, hostileHealth)
	requireState(t, e.r, node.StateUp, "pass", "acl")
	down := map[string]string{"wrongpass": "WRONGPASS", "nopass": "NOAUTH", "wrongacl": "WRONGPASS", "nouser": "WRONGPASS"}
	var downNames []string
	for name, want := range down {
		e.wait(name, node.StateDown, "node "+name, want)
		downNames = append(downNames, name)
	}
	const loaded = 20
	e.load("au", loaded)
	id := e.order("au", "au", "", "acl")
	e.must("Reserve over the authenticated nodes", e.reserve(id, "au", loaded))
	_, err := e.inv.Confirm(e.ctx, id)
	e.must("Confirm", err)
	err = e.reserve(e.order("au-x", "au", "", "wrongacl"), "au", 1)
	hostileWantErr(t, "Reserve homed on a node refusing our credentials", err, inventory.ErrUnavailable, "node wrongacl", "WRONGPASS")
	if lvl := hostileInvariant(t, e.inv, "au", loaded, downNames...); lvl.Confirmed != loaded {
		t.Fatalf("stock %+v", lvl)
	}
	// The ACL node really is used as alice.
	if list := acl.Client(t).ClientList(e.ctx).Val(); !strings.Contains(list, "user=alice") {
		t.Fatalf("CLIENT LIST on the ACL node shows no connection of alice:\n%s", list)
	}
	secNoSecrets(t, map[string]string{"password": pw, "acl password": aclPW, "wrong password": wrongPW},
		e.logs.String(), fmt.Sprint(e.r.Status()), fmt.Sprint(err))
}

// TestTLSNodes: nodes reached over TLS (server-only and mutual) are UP and
// serve; a wrong CA, a wrong server name, a missing client certificate,
// TLS to a plain port and plain to a TLS port are DOWN with a reason
// naming the node and the problem.
func TestTLSNodes(t *testing.T) {
	t.Parallel()
	secRequireRedisTLS(t)
	dir := t.TempDir()
	ca, other := secNewCA(t, dir, "node-ca"), secNewCA(t, dir, "other-ca")
	srvPair, client := ca.issue(t, dir, "redis", true), ca.issue(t, dir, "shardis", false)
	tlsRedis := func(mutual bool) (*redisproc.Server, string) {
		s, port, err := secStartTLS(t, t.TempDir(), srvPair, ca, mutual)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Kill(); _ = s.Close() })
		return s, fmt.Sprintf("127.0.0.1:%d", port)
	}
	oneWay, oneWayAddr := tlsRedis(false)
	_, mutualAddr := tlsRedis(true)
	nodeTLS := func(addr string, t config.NodeTLS) config.Node { return config.Node{Addr: addr, Weight: 1, TLS: t} }
	good := hostileStart(t, map[string]config.Node{
		"tls":  nodeTLS(oneWayAddr, config.NodeTLS{CAFile: ca.File, ServerName: secServerName}),
		"mtls": nodeTLS(mutualAddr, config.NodeTLS{CAFile: ca.File, CertFile: client.CertFile, KeyFile: client.KeyFile}),
	}, hostileHealth)
	requireState(t, good.r, node.StateUp, "tls", "mtls")
	const loaded = 10
	good.load("tl", loaded)
	good.must("Reserve over TLS nodes", good.reserve("tl-1", "tl", loaded))
	_, err := good.inv.Confirm(good.ctx, "tl-1")
	good.must("Confirm", err)
	if lvl := hostileInvariant(t, good.inv, "tl", loaded); lvl.Confirmed != loaded {
		t.Fatalf("stock %+v", lvl)
	}

	_, badNameAddr := tlsRedis(false)
	_, mutual2Addr := tlsRedis(true)
	bad := map[string]struct {
		node config.Node
		want string
	}{
		"wrongca":  {nodeTLS(oneWayAddr, config.NodeTLS{CAFile: other.File, ServerName: secServerName}), "certificate signed by unknown authority"},
		"badname":  {nodeTLS(badNameAddr, config.NodeTLS{CAFile: ca.File, ServerName: "evil.example"}), "not evil.example"},
		"nocert":   {nodeTLS(mutualAddr, config.NodeTLS{CAFile: ca.File}), ""},
		"tlsplain": {nodeTLS(oneWay.Addr(), config.NodeTLS{CAFile: ca.File}), ""}, // a plain port never answers a ClientHello: timeout
		"plaintls": {config.Node{Addr: mutual2Addr, Weight: 1}, ""},
	}
	nodes := map[string]config.Node{}
	for name, b := range bad {
		nodes[name] = b.node
	}
	e := hostileStart(t, nodes, hostileHealth)
	for name, b := range bad {
		e.wait(name, node.StateDown, "node "+name, b.want)
	}
}

// secService starts the service over cfg, logging to log, stopped when the
// test ends.
func secService(t testing.TB, cfg *config.Config, log *slog.Logger) *service.Server {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Service.Listen = "127.0.0.1:0"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, err := service.Start(ctx, cfg, log)
	if err != nil {
		t.Fatalf("service.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// secConfig is a configuration with route r of the inventory server over
// nodes.
func secConfig(nodes map[string]config.Node) *config.Config {
	cfg := config.Default()
	cfg.Nodes = nodes
	var names []string
	for name := range nodes {
		names = append(names, name)
	}
	cfg.Servers = map[string]config.Server{invServer: {OnNodeDown: config.OnNodeDownFail, Routes: map[string][]string{"r": names}}}
	cfg.Health = hostileHealth
	return &cfg
}

// secReq wraps msg in a request carrying "Authorization: auth" (none if
// auth is empty).
func secReq[T any](msg *T, auth string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if auth != "" {
		req.Header().Set("Authorization", auth)
	}
	return req
}

// TestAuthServiceToken: with service.auth_token set, a call without the
// header, with a wrong token or a malformed header is unauthenticated and
// the right one passes; /healthz and /metrics stay open. Without a
// token, calls need no header.
func TestAuthServiceToken(t *testing.T) {
	t.Parallel()
	_, n := hostileRedis(t, redistest.Options{})
	const token = "tok-3e9d1a7c"
	cfg := secConfig(map[string]config.Node{"n1": n})
	cfg.Service.AuthToken = token
	srv := secService(t, cfg, nil)
	base := "http://" + srv.Addr()
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, base)
	admin := shardisv1connect.NewAdminServiceClient(http.DefaultClient, base)
	ctx := invCtx(t, 10*time.Second)
	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer wrong", "bearer " + token, "Bearer " + token + "x",
		"Bearer " + token[:len(token)-1], "Basic " + token, token, "Bearer  " + token} {
		_, err := admin.ListNodes(ctx, secReq(&v1.ListNodesRequest{}, auth))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("ListNodes with Authorization %q: %v, want unauthenticated", auth, err)
		}
		_, err = inv.LoadStock(ctx, secReq(&v1.LoadStockRequest{RouteKey: "r", SkuId: "tk", Quantity: 5}, auth))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("LoadStock with Authorization %q: %v, want unauthenticated", auth, err)
		}
	}
	res, err := inv.GetStock(ctx, secReq(&v1.GetStockRequest{RouteKey: "r", SkuId: "tk"}, "Bearer "+token))
	if err != nil || res.Msg.Stock.Loaded != 0 {
		t.Fatalf("GetStock with the token: %v, %v (unauthenticated LoadStock must not have loaded)", res, err)
	}
	for _, path := range []string{"/healthz", "/metrics"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s without a token: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}

	open := secService(t, secConfig(map[string]config.Node{"n1": n}), nil)
	openAdmin := shardisv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+open.Addr())
	if _, err := openAdmin.ListNodes(ctx, secReq(&v1.ListNodesRequest{}, "")); err != nil {
		t.Fatalf("ListNodes without auth_token configured: %v", err)
	}
}

// TestTLSServiceMutual: the service with service.tls and client_ca_file
// serves clients presenting a certificate of that CA; without one, with
// one of another CA, not trusting the server, or in plaintext the call
// fails at the TLS layer. Without client_ca_file no client certificate is
// asked for.
func TestTLSServiceMutual(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	serverCA, clientCA, other := secNewCA(t, dir, "service-ca"), secNewCA(t, dir, "client-ca"), secNewCA(t, dir, "rogue-ca")
	srvPair := serverCA.issue(t, dir, "service", true)
	client, rogue := clientCA.issue(t, dir, "operator", false), other.issue(t, dir, "rogue", false)
	_, n := hostileRedis(t, redistest.Options{})
	cfg := secConfig(map[string]config.Node{"n1": n})
	cfg.Service.TLS = config.ServiceTLS{CertFile: srvPair.CertFile, KeyFile: srvPair.KeyFile, ClientCAFile: clientCA.File}
	mutual := secService(t, cfg, nil)
	cfg = secConfig(map[string]config.Node{"n1": n})
	cfg.Service.TLS = config.ServiceTLS{CertFile: srvPair.CertFile, KeyFile: srvPair.KeyFile}
	oneWay := secService(t, cfg, nil)
	// Generous bounds, which only a hung call would reach: each call gets
	// 30 s, the test 90 s. With 5 s and 10 s, beside two other suites on
	// 2 cores, the client not trusting the certificate answered
	// deadline_exceeded (Client.Timeout exceeded while awaiting headers)
	// before its TLS handshake had failed.
	ctx := invCtx(t, 90*time.Second)
	call := func(url string, tc *tls.Config) error {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true}, Timeout: 30 * time.Second}
		defer hc.CloseIdleConnections()
		_, err := shardisv1connect.NewInventoryServiceClient(hc, url).LoadStock(ctx,
			secReq(&v1.LoadStockRequest{RouteKey: "r", SkuId: "mt", Quantity: 3}, ""))
		return err
	}
	withCert := &tls.Config{RootCAs: serverCA.pool(), Certificates: []tls.Certificate{client.TLS}}
	if err := call("https://"+mutual.Addr(), withCert); err != nil {
		t.Fatalf("LoadStock with a client certificate: %v", err)
	}
	// handshake dials with tc and reads: the error a TLS 1.3 server's alert
	// about the client's certificate arrives with.
	handshake := func(tc *tls.Config) error {
		conn, err := tls.Dial("tcp", mutual.Addr(), tc)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second)) // the alert comes at once; a loaded machine delays it
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	sendRogue := func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogue.TLS, nil }
	for what, tc := range map[string]*tls.Config{
		"no client certificate":          {RootCAs: serverCA.pool()},
		"a certificate of another CA":    {RootCAs: serverCA.pool(), GetClientCertificate: sendRogue},
		"a client not trusting the cert": {Certificates: []tls.Certificate{client.TLS}},
	} {
		// A TLS 1.3 server rejects the client's certificate after the
		// client thinks the handshake is done, so the refusal reaches the
		// Connect client either as a failed dial (unavailable) or as a
		// reset while it writes the request, which connect-go reports as
		// canceled. Both are transport failures; no response came back.
		start := time.Now()
		if err := call("https://"+mutual.Addr(), tc); err == nil ||
			(connect.CodeOf(err) != connect.CodeUnavailable && connect.CodeOf(err) != connect.CodeCanceled) {
			t.Fatalf("LoadStock with %s: %v after %v, want a transport failure", what, err, time.Since(start))
		}
		err := handshake(tc)
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("TLS with %s: %v, want a certificate error", what, err)
		}
		t.Logf("with %s: %v", what, err)
	}
	if err := call("http://"+mutual.Addr(), nil); err == nil {
		t.Fatal("plaintext LoadStock to the TLS port succeeded")
	}
	if err := call("https://"+oneWay.Addr(), &tls.Config{RootCAs: serverCA.pool()}); err != nil {
		t.Fatalf("LoadStock without a client certificate, no client_ca_file: %v", err)
	}
}

// secMsg returns a response's message, or nil for no response.
func secMsg[T any, PT interface {
	*T
	proto.Message
}](r *connect.Response[T]) proto.Message {
	if r == nil {
		return nil
	}
	return PT(r.Msg)
}

// secNoSecrets fails the test if any secret (or its distinctive tail)
// occurs in any of the texts.
func secNoSecrets(t testing.TB, secrets map[string]string, texts ...string) {
	t.Helper()
	all := strings.Join(texts, "\n")
	for what, s := range secrets {
		for _, frag := range []string{s, s[len(s)/2:]} {
			if i := strings.Index(all, frag); i >= 0 {
				t.Errorf("the %s leaked: %q", what, all[max(0, i-120):min(len(all), i+len(frag)+40)])
			}
		}
	}
}

// TestSecSecretsNeverLeak runs a service with node passwords (requirepass
// and ACL), a wrong password, a node that dies and an auth token, drives
// failures and successes, and requires that no secret appears in the
// debug logs, the RPC errors and replies, ListNodes or /metrics.
func TestSecSecretsNeverLeak(t *testing.T) {
	// Not parallel: service.Start points go-redis's process-wide logger at
	// this test's buffer, so the buffer sees its dial errors too.
	t.Cleanup(func() { redis.SetLogger(quietLogger{}) })
	secrets := map[string]string{
		"node password": "np-5c1e0b9d2f7a", "acl password": "ap-8e3b6a1d4c90", "wrong password": "wp-2a7f9c3e1b58",
		"server password": "sp-6d0a4e8b3f17", "down node password": "dp-9b5c2f7e0a64",
		"auth token": "tk-4f8a1d6c3e29", "wrong token": "wt-1e6b9d3a7c05",
	}
	_, n1 := hostileRedis(t, redistest.Options{Password: secrets["node password"]})
	_, n2 := hostileRedis(t, redistest.Options{Args: secACLArgs("alice", secrets["acl password"])})
	_, n3 := hostileRedis(t, redistest.Options{Password: secrets["server password"]})
	s4, n4 := hostileRedis(t, redistest.Options{Password: secrets["down node password"]})
	n1.Password = secrets["node password"]
	n2.Username, n2.Password = "alice", secrets["acl password"]
	n3.Password = secrets["wrong password"]
	n4.Password = secrets["down node password"]
	cfg := secConfig(map[string]config.Node{"n1": n1, "n2": n2, "n3": n3, "n4": n4})
	cfg.Service.AuthToken = secrets["auth token"]
	log, logs := secLogger()
	srv := secService(t, cfg, log)
	base := "http://" + srv.Addr()
	inv := shardisv1connect.NewInventoryServiceClient(http.DefaultClient, base)
	admin := shardisv1connect.NewAdminServiceClient(http.DefaultClient, base)
	ctx := invCtx(t, 20*time.Second)
	var seen []string
	record := func(m proto.Message, err error) {
		if err != nil {
			seen = append(seen, fmt.Sprintf("%v %+v", err, err))
		}
		if m != nil {
			b, _ := protojson.Marshal(m)
			seen = append(seen, string(b))
		}
	}
	auth := "Bearer " + secrets["auth token"]
	for _, bad := range []string{"", "Bearer " + secrets["wrong token"], secrets["wrong token"]} {
		res, err := admin.ListNodes(ctx, secReq(&v1.ListNodesRequest{}, bad))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Fatalf("ListNodes with a bad token: %v", err)
		}
		record(secMsg(res), err)
	}
	res, err := inv.LoadStock(ctx, secReq(&v1.LoadStockRequest{RouteKey: "r", SkuId: "sec", Quantity: 30}, auth))
	if err != nil {
		t.Fatalf("LoadStock: %v", err)
	}
	record(res.Msg, err)
	// waitNodes polls ListNodes until n1, n2 are UP, n3 is DOWN for
	// WRONGPASS and n4 has the state n4Up.
	waitNodes := func(n4Up bool) {
		for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			nodes, err := admin.ListNodes(ctx, secReq(&v1.ListNodesRequest{}, auth))
			if err != nil {
				t.Fatal(err)
			}
			record(nodes.Msg, err)
			ok := true
			for _, ni := range nodes.Msg.Nodes {
				up := ni.Name == "n1" || ni.Name == "n2" || (ni.Name == "n4" && n4Up)
				ok = ok && up == (ni.State == v1.NodeState_NODE_STATE_UP)
				ok = ok && (ni.Name != "n3" || strings.Contains(ni.DownReason, "WRONGPASS"))
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("ListNodes: %v, want n1, n2 UP, n3 DOWN for WRONGPASS, n4 up=%v", nodes.Msg.Nodes, n4Up)
			}
		}
	}
	waitNodes(true)
	s4.Kill()
	waitNodes(false)
	ring := hostileRing(t, []string{"n1", "n2", "n3", "n4"})
	for _, home := range []string{"n1", "n3", "n4"} {
		var id string
		for i := 0; id == ""; i++ {
			if c := fmt.Sprintf("sec-%s-%d", home, i); ring.Name(ring.Home("order:"+c)) == home {
				id = c
			}
		}
		r, err := inv.Reserve(ctx, secReq(&v1.ReserveRequest{OrderId: id, Items: []*v1.Item{{RouteKey: "r", SkuId: "sec", Quantity: 1}}}, auth))
		record(secMsg(r), err)
		if home == "n1" && err != nil || home != "n1" && (connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), home)) {
			t.Fatalf("Reserve homed on %s: %v (want ok on n1, unavailable naming the node otherwise)", home, err)
		}
	}
	st, err := inv.GetStock(ctx, secReq(&v1.GetStockRequest{RouteKey: "r", SkuId: "sec"}, auth))
	record(secMsg(st), err)
	for _, path := range []string{"/metrics", "/healthz"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		seen = append(seen, string(body))
	}
	captured := logs.String()
	for _, want := range []string{"WRONGPASS", "unauthenticated", `"node":"n4"`} {
		if !strings.Contains(captured, want) {
			t.Errorf("captured logs lack %q: the failures were not logged, so the check proves little", want)
		}
	}
	secNoSecrets(t, secrets, append(seen, captured)...)
	if t.Failed() {
		t.Logf("captured logs:\n%s", captured)
	}
}
