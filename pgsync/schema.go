package pgsync

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrSchema is wrapped when the database's schema is not the one this
// build writes: missing (run `shardis sync --migrate`) or newer than it.
var ErrSchema = errors.New("sync schema mismatch")

// migrations are the schema's versions, in order; migration i takes the
// schema from version i to i+1. Never edit one that shipped: append.
var migrations = []string{
	// 1: the movements, the consumer positions and the incarnations seen.
	`
CREATE TABLE stock_movements (
  node        text        NOT NULL,
  incarnation text        NOT NULL,
  queue       integer     NOT NULL,
  redo_offset bigint      NOT NULL,
  part_id     text        NOT NULL,
  order_id    text        NOT NULL,
  route       text        NOT NULL,
  sku         text        NOT NULL,
  quantity    bigint      NOT NULL,
  state       text        NOT NULL CHECK (state IN ('pending', 'confirmed', 'cancelled', 'expired', 'lost')),
  reserved_at timestamptz,
  settled_at  timestamptz,
  landed_at   timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node, incarnation, queue, redo_offset)
);
CREATE UNIQUE INDEX stock_movements_part ON stock_movements (node, part_id);
CREATE INDEX stock_movements_pending ON stock_movements (node, incarnation, queue, redo_offset) WHERE state = 'pending';
CREATE INDEX stock_movements_sku ON stock_movements (route, sku);
CREATE INDEX stock_movements_order ON stock_movements (order_id);

CREATE TABLE sync_positions (
  node        text        NOT NULL,
  incarnation text        NOT NULL,
  queue       integer     NOT NULL,
  redo_offset bigint      NOT NULL,
  part_id     text        NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node, incarnation, queue)
);

CREATE TABLE sync_incarnations (
  node        text        NOT NULL,
  incarnation text        NOT NULL,
  generation  bigint      NOT NULL,
  first_seen  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node, incarnation)
);
`,
	// 2: why a cancelled part was cancelled (CancelReason); NULL on the
	// rows landed before (and whenever the order's record could not be
	// read).
	`
ALTER TABLE stock_movements ADD COLUMN reason text CHECK (reason IN ('cancelled', 'expired', 'refused'));
`,
	// 3: held_by, the later incarnation of the node whose landing last
	// updated the row (sqlInsert: it handed the part out again, a lost or
	// expired row then pending again, or moved its state on; NULL while
	// only the row's own incarnation updated it), which a pending row is
	// re-read against (a missing part: expired or lost); conflict_in, the incarnation
	// whose conflict with the row was reported (once: a replay does not
	// report it again).
	`
ALTER TABLE stock_movements ADD COLUMN held_by text, ADD COLUMN conflict_in text;
`,
	// 4: sync_gaps, the redo-log ranges trimmed before they landed, written
	// in the transaction that moves the position past them (before, the
	// loss was only logged and counted after the commit: a crash between
	// the two left it nowhere).
	`
CREATE TABLE sync_gaps (
  node         text        NOT NULL,
  incarnation  text        NOT NULL,
  queue        integer     NOT NULL,
  first_offset bigint      NOT NULL,
  last_offset  bigint      NOT NULL,
  missing      bigint      NOT NULL,
  found_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (node, incarnation, queue, first_offset)
);
`,
}

// SchemaVersion is the schema version this build reads and writes.
var SchemaVersion = len(migrations)

// migrateLock is the advisory lock that serialises migrations of
// concurrent instances ("shardis-sync-schema" in ASCII, truncated).
const migrateLock int64 = 0x7368617264697331

// Migrate brings the schema to [SchemaVersion] in one transaction (safe
// to run from several instances at once: they serialise on an advisory
// lock) and returns the version it found and the version it left. A
// database at a newer version than this build is refused with [ErrSchema].
// Running syncers' landing and settle transactions hold the same lock
// shared: a migration waits for those under way, and the next ones read
// the new version and stop a syncer of another build ([Syncer.Err]).
func Migrate(ctx context.Context, pool *pgxpool.Pool) (from, to int, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", migrateLock); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS shardis_sync_schema (
  version    integer     PRIMARY KEY,
  applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM shardis_sync_schema").Scan(&from); err != nil {
			return err
		}
		if from > SchemaVersion {
			return fmt.Errorf("%w: the database is at schema version %d, this shardis writes version %d: upgrade shardis", ErrSchema, from, SchemaVersion)
		}
		for v := from; v < SchemaVersion; v++ {
			if _, err := tx.Exec(ctx, migrations[v]); err != nil {
				return fmt.Errorf("migration to version %d: %w", v+1, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO shardis_sync_schema (version) VALUES ($1)", v+1); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return from, from, fmt.Errorf("pgsync: migrate: %w", err)
	}
	return from, SchemaVersion, nil
}

// CheckSchema returns nil when the database is at [SchemaVersion], and an
// error wrapping [ErrSchema] that says what to do otherwise.
func CheckSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var v int
	err := pool.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM shardis_sync_schema").Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		v, err = 0, nil
	}
	switch {
	case err != nil:
		return fmt.Errorf("pgsync: reading the schema version: %w", err)
	case v < SchemaVersion:
		return fmt.Errorf("%w: the database is at schema version %d, this shardis needs %d: run `shardis sync --migrate` (or `shardis sync migrate`)",
			ErrSchema, v, SchemaVersion)
	case v > SchemaVersion:
		return fmt.Errorf("%w: the database is at schema version %d, this shardis writes version %d: upgrade shardis", ErrSchema, v, SchemaVersion)
	}
	return nil
}

// schemaChanged is the error of a running syncer that finds the database
// at schema version v, not [SchemaVersion]: migrated since it started
// (by a newer build, whose rows this one must not write), or set back.
func schemaChanged(v int) error {
	return fmt.Errorf("%w: the database is now at schema version %d, this shardis writes version %d: "+
		"it was migrated while this sync ran; stopped (run the shardis that migrated it)", ErrSchema, v, SchemaVersion)
}
