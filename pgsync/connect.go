package pgsync

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shardis/shardis/config"
)

// Connect opens the PostgreSQL pool a syncer over nodes redis nodes lands
// through: sessions with idle_in_transaction_session_timeout set to
// set.IdleInTransactionTimeout, at most two connections per node and two
// more (4..32).
// With migrate it brings the schema to [SchemaVersion], else a schema at
// another version is an error ([ErrSchema]). It waits while the database
// cannot be reached (logging once to set.Logger, retrying every
// set.RetryBackoff), so a sync started before PostgreSQL simply starts
// late; ctx bounds the wait. Credentials refused return [ErrAuth] at
// once, a database not encoded in UTF8 [ErrEncoding], and any other
// refusal of the server that a retry would meet again (a database that
// does not exist, a privilege the role lacks) the server's error. Unset
// settings take their defaults, as in [New].
func Connect(ctx context.Context, dsn string, nodes int, set Settings, migrate bool) (*pgxpool.Pool, error) {
	set.defaults()
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnError(dsn, err)
	}
	// A hung instance's session holding queue locks mid-transaction is
	// ended by the server (Settings.IdleInTransactionTimeout).
	pc.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] =
		strconv.FormatInt(max(set.IdleInTransactionTimeout.Milliseconds(), 1), 10)
	// Ids are UTF-8 (the database must be too: checkEncoding).
	pc.ConnConfig.RuntimeParams["client_encoding"] = "UTF8"
	// Two workers per node each hold at most one connection at a time;
	// beyond 32 they take turns rather than crowd the server.
	pc.MaxConns = int32(max(4, min(32, 2*nodes+2)))
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgsync: %w", err)
	}
	if err := waitSchema(ctx, pool, migrate, set.Logger, set.RetryBackoff); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// dsnError is pgx's refusal to parse dsn, quoting the DSN as
// config.RedactDSN redacts it: pgx quotes it redacted by two patterns
// (password='…', password=…), which miss libpq's other spellings
// (password = '…', an escaped quote or space in the value) and show the
// password or its tail. Only what follows pgx's quote is kept.
func dsnError(dsn string, err error) error {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		msg = "cannot parse it"
		if i := strings.LastIndex(pe.Error(), "`: "); i >= 0 {
			msg = pe.Error()[i+len("`: "):]
		}
	}
	return fmt.Errorf("sync.dsn: cannot parse `%s`: %s", config.RedactDSN(dsn), msg)
}

// ErrAuth is wrapped when PostgreSQL refuses sync.dsn's credentials
// (SQLSTATE 28P01 invalid_password, 28000
// invalid_authorization_specification): waiting would not help, so
// [Connect] returns it at once.
var ErrAuth = errors.New("PostgreSQL refused the credentials of sync.dsn")

// ErrEncoding is wrapped when sync.dsn's database is not encoded in UTF8
// (or SQL_ASCII, which stores the bytes as they are): ids are UTF-8, and
// another encoding would store them as other characters, or refuse them
// and stop the landing. [Connect] returns it at once.
var ErrEncoding = errors.New("the sync's database is not encoded in UTF8")

// authFailure wraps err in ErrAuth when it is PostgreSQL refusing the
// credentials; it returns nil otherwise.
func authFailure(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (pe.Code == "28P01" || pe.Code == "28000") {
		return fmt.Errorf("pgsync: %w: %s (SQLSTATE %s)", ErrAuth, pe.Message, pe.Code)
	}
	return nil
}

// waitSchema checks the database's encoding, then migrates or checks the
// schema, retrying while the database cannot be reached. A database not
// in UTF8, a schema at the wrong version, credentials refused, or any
// other refusal the server answered that a retry would meet again (a
// database that does not exist, a privilege the role lacks) are returned
// at once; a server starting up or shutting down, out of resources, or
// a transaction it rolled back (serialization, deadlock, a lock not
// available) is waited for.
func waitSchema(ctx context.Context, pool *pgxpool.Pool, migrate bool, log *slog.Logger, backoff time.Duration) error {
	for tries := 0; ; tries++ {
		err := checkSchemaOnce(ctx, pool, migrate, log)
		if err == nil || errors.Is(err, ErrSchema) || errors.Is(err, ErrEncoding) {
			return err
		}
		if aerr := authFailure(err); aerr != nil {
			return aerr
		}
		if answered(err) && !transientAnswer(err) {
			return fmt.Errorf("pgsync: PostgreSQL refused the sync's setup: %w", err)
		}
		if tries == 0 {
			log.Warn("PostgreSQL not reachable: waiting for it", "err", err)
		}
		if !sleep(ctx, backoff) {
			return fmt.Errorf("pgsync: waiting for PostgreSQL: %w (last error: %v)", ctx.Err(), err)
		}
	}
}

// transientAnswer reports whether err, a reply of the server, is one a
// retry may not meet: a transaction rolled back (class 40: serialization
// failure, deadlock) or a lock not available (55P03).
func transientAnswer(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (strings.HasPrefix(pe.Code, "40") || pe.Code == "55P03")
}

// checkSchemaOnce checks the database's encoding, then migrates the
// schema (migrate) or checks its version.
func checkSchemaOnce(ctx context.Context, pool *pgxpool.Pool, migrate bool, log *slog.Logger) error {
	if err := checkEncoding(ctx, pool); err != nil {
		return err
	}
	if !migrate {
		return CheckSchema(ctx, pool)
	}
	from, to, err := Migrate(ctx, pool)
	if err == nil && from != to {
		log.Info("sync schema migrated", "from_version", from, "to_version", to)
	}
	return err
}

// checkEncoding returns an error wrapping ErrEncoding when the database
// pool connects to is encoded in neither UTF8 nor SQL_ASCII.
func checkEncoding(ctx context.Context, pool *pgxpool.Pool) error {
	var enc string
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_encoding')").Scan(&enc); err != nil {
		return fmt.Errorf("pgsync: reading the database's encoding: %w", err)
	}
	if enc != "UTF8" && enc != "SQL_ASCII" {
		return fmt.Errorf("pgsync: %w: it is %s; create it with ENCODING 'UTF8'", ErrEncoding, enc)
	}
	return nil
}
