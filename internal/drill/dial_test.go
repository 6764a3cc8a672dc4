package drill

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
)

// Heal reads every node's master in the node's own database: a node
// configured with db: 1 keeps the inventory's keys in database 1, and a
// part pending there is counted. Found by a review: masters connected to
// database 0, so the "parts still pending" check passed with a part
// pending and every order record was missed (false violations).
func TestHealReadsTheNodesDatabase(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	db1 := redis.NewClient(&redis.Options{Addr: s.Addr(), DB: 1, Protocol: 2})
	defer db1.Close()
	if err := db1.ZAdd(ctx, inventory.PendingKey, redis.Z{Score: 1, Member: "o-1|0|n1"}).Err(); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: s.Addr(), DB: 1, Weight: 1}}
	cs, closeAll, err := masters(ctx, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll()
	if got := waitNoPending(ctx, cs, 100*time.Millisecond); got != 1 {
		t.Fatalf("waitNoPending over a node with db: 1 and one pending part there: got %d pending, want 1", got)
	}
}

// Heal dials a node's master with the node's TLS settings, as the router
// does (router.NodeTLS: the server name, the CA), and refuses a CA file
// that does not load, naming the setting. Found by a review: masters
// dialed every node in plain text, which a TLS-only node refuses.
func TestHealDialsTheNodesTLS(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.Nodes = map[string]config.Node{"n1": {Addr: "127.0.0.1:1", Weight: 1, TLS: config.NodeTLS{ServerName: "redis.example"}}}
	cs, closeAll, err := masters(ctx, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg := cs["n1"].Options().TLSConfig
	closeAll()
	if tlsCfg == nil || tlsCfg.ServerName != "redis.example" {
		t.Fatalf("master client of a node with tls.server_name redis.example: TLS config %+v, want that server name", tlsCfg)
	}
	cfg.Nodes = map[string]config.Node{"n1": {Addr: "127.0.0.1:1", Weight: 1, TLS: config.NodeTLS{CAFile: "/nonexistent/ca.pem"}}}
	if _, _, err := masters(ctx, &cfg); err == nil ||
		!strings.Contains(err.Error(), "nodes.n1.tls.ca_file") || !strings.Contains(err.Error(), "/nonexistent/ca.pem") {
		t.Fatalf("a node whose CA file is missing: got %v, want an error naming nodes.n1.tls.ca_file and the file", err)
	}
}
