package pgsync_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/pgsync"
)

// Ids are UTF-8 (inventory refuses others), and PostgreSQL is the system
// of record other programs read. A database created in another encoding
// (LATIN1) makes the server take the sync's bytes as that encoding: the
// SKU "日本" (6 bytes of UTF-8) was stored as six LATIN1 characters, which
// every UTF-8 reader gets back as mojibake (or, with the client encoding
// set to UTF8, the landing fails for ever and nothing of the node lands).
// The sync must not write to such a database: Connect refuses it at once,
// saying why ([pgsync.ErrEncoding]), as it refuses another schema.
func TestReview2NonUTF8DatabaseRefused(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE latin ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"); err != nil {
		t.Fatal(err)
	}
	dsn := srv.DSN("latin")
	pool, err := pgsync.Connect(ctx, dsn, 3, pgsync.Settings{RetryBackoff: 100 * time.Millisecond, Logger: quiet()}, true)
	if err == nil {
		defer pool.Close()
		// what the sync would write: a row naming the SKU, read back by a
		// UTF-8 client
		if _, err := pool.Exec(ctx, `INSERT INTO stock_movements (node, incarnation, queue, redo_offset, part_id, order_id, route, sku, quantity, state)
VALUES ('n1', 'i', 0, 1, 'o|t|0', 'o', 'one', $1, 1, 'pending')`, "日本"); err != nil {
			t.Fatalf("Connect accepted a LATIN1 database, whose landing then fails: %v", err)
		}
		pc, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		pc.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
		reader, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			t.Fatal(err)
		}
		defer reader.Close()
		var sku string
		if err := reader.QueryRow(ctx, "SELECT sku FROM stock_movements").Scan(&sku); err != nil {
			t.Fatal(err)
		}
		t.Fatalf("Connect accepted a LATIN1 database: the SKU %q reads back as %q to a UTF-8 client", "日本", sku)
	}
	if !errors.Is(err, pgsync.ErrEncoding) {
		t.Fatalf("Connect to a LATIN1 database: %v, want ErrEncoding", err)
	}
	t.Logf("refused: %v", err)
}
