package pgsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/pgsync"
)

// TestConnectRefusalReturnsAtOnce: a refusal the server answered that a
// retry meets again (here a database that does not exist, SQLSTATE 3D000)
// is returned at once with the server's words, not waited out as "not
// reachable" until ctx ends (which left `shardis sync` hanging with a log
// line that blamed the network).
func TestConnectRefusalReturnsAtOnce(t *testing.T) {
	srv := pgtest.Start(t, "pw")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=shardis password=pw dbname=nosuch sslmode=disable", srv.Port())
	start := time.Now()
	_, err := pgsync.Connect(ctx, dsn, 1, pgsync.Settings{RetryBackoff: 100 * time.Millisecond, Logger: quiet()}, true)
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "3D000") || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("Connect to a database that does not exist: %v; want the server's refusal (3D000) naming it", err)
	}
	if took > 10*time.Second {
		t.Errorf("Connect took %v to return the refusal: want at once, not after ctx", took)
	}
}
