package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/drill"
	"github.com/shardis/shardis/internal/redisproc"
)

// TestNewDrillFlags: a victim not in the configuration and a --containers
// entry that is not addr=container are refused, naming them; the URL
// defaults to service.listen.
func TestNewDrillFlags(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shardis.yaml")
	yaml := "service: {listen: 127.0.0.1:26300}\nnodes:\n  n1: {addr: 127.0.0.1:26301}\n" +
		"servers:\n  inventory:\n    routes: {clothes: [n1]}\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newDrill(path, "", "n9", time.Second, "127.0.0.1:26301=c1"); err == nil || !strings.Contains(err.Error(), `"n9"`) {
		t.Fatalf("--kill n9: got %v, want an error naming n9", err)
	}
	if _, err := newDrill(path, "", "n1", time.Second, "127.0.0.1:26301"); err == nil || !strings.Contains(err.Error(), `"127.0.0.1:26301"`) {
		t.Fatalf("--containers without =: got %v, want an error naming the entry", err)
	}
	d, err := newDrill(path, "", "n1", time.Second, "127.0.0.1:26301=c1")
	if err != nil {
		t.Fatal(err)
	}
	if d.base != "http://127.0.0.1:26300" || d.containers["127.0.0.1:26301"] != "c1" {
		t.Fatalf("base %q containers %v", d.base, d.containers)
	}
}

// TestSentinelGroupLookup: against a real Sentinel group (master, replica,
// three sentinels), waitGroup sees it ready for a failover and drill.MasterAddr
// names the master the group has; it asks the sentinels with the node's
// sentinel credentials, as the router does, so a user these sentinels do
// not have is refused (found by a review: MasterAddr and
// waitGroup dialed the sentinels without credentials or TLS).
func TestSentinelGroupLookup(t *testing.T) {
	g, err := redisproc.StartGroup(redisproc.GroupOptions{Name: "drill-docker", KillWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	node := config.Node{Sentinel: config.Sentinel{Master: g.Name, Addrs: g.SentinelAddrs()}}
	ctx := context.Background()
	if err := waitGroup(ctx, "n1", node, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	want, err := g.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := drill.MasterAddr(ctx, "n1", node)
	if err != nil || got != want {
		t.Fatalf("MasterAddr = %q, %v; want %q", got, err, want)
	}
	if _, err := drill.MasterAddr(ctx, "n1", config.Node{Sentinel: config.Sentinel{Master: "no-such-group", Addrs: g.SentinelAddrs()}}); err == nil ||
		!strings.Contains(err.Error(), "no-such-group") {
		t.Fatalf("unknown group: got %v, want an error naming it", err)
	}
	withUser := node
	withUser.Sentinel.Username, withUser.Sentinel.Password = "no-such-user", "pw"
	if got, err := drill.MasterAddr(ctx, "n1", withUser); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("sentinel.username the sentinels do not have: MasterAddr = %q, %v; want their WRONGPASS refusal", got, err)
	}
	if err := waitGroup(ctx, "n1", withUser, time.Second); err == nil {
		t.Fatal("waitGroup with a sentinel.username the sentinels do not have: ready, want not within 1s")
	}
}

// waitReady returns within its limit, with an error naming /readyz, when
// the service accepts the request and never answers. Found by a review:
// its requests ran on context.Background() with http.DefaultClient, so a
// stalled service held the drill forever.
func TestWaitReadyBoundedOnStalledService(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	done := make(chan error, 1)
	go func() { done <- waitReady(context.Background(), srv.URL, 200*time.Millisecond) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "/readyz") {
			t.Fatalf("waitReady against a stalled service: %v, want an error naming /readyz", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("waitReady with limit 200ms has not returned after 3s")
	}
}
