package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Sync configures `shardis sync`, the consumer that lands every redo-log
// deduction in PostgreSQL (package pgsync). Only `shardis sync` needs it:
// [Config.Validate] checks the values that are set, [Config.ValidateSync]
// also requires the DSN.
type Sync struct {
	// DSN is the PostgreSQL connection string, as a URL
	// (postgres://user:password@host:5432/db?sslmode=disable) or in
	// key=value form (host=… user=… dbname=…). It usually holds a
	// password: set it with SHARDIS_SYNC__DSN rather than in the file.
	// Required by `shardis sync`.
	// default: "" (none)
	DSN string `koanf:"dsn"`
	// Listen is the host:port of the sync's /metrics and /healthz; ""
	// serves neither.
	// default: 127.0.0.1:7401
	Listen string `koanf:"listen"`
	// Batch is the most redo-log entries one node's transaction lands
	// (1..10000); a node with more waiting runs the next batch at once.
	// default: 1000
	Batch int `koanf:"batch"`
	// PollInterval is how often a node whose redo log had nothing new is
	// read again.
	// default: 100ms
	PollInterval time.Duration `koanf:"poll_interval"`
	// SettleInterval is how often the sync reads each node's settled log
	// (the parts that left pending there), so a part landed while pending
	// has its row updated within about this once it is confirmed or
	// cancelled.
	// default: 1s
	SettleInterval time.Duration `koanf:"settle_interval"`
	// SettleWalkInterval is how often the sync re-reads every part landed
	// while pending on its node anyway (a cost in proportion to how many
	// are pending), for what the settled log does not name: a part whose
	// record outlived its retention, one a release without the log
	// settled, entries trimmed before they were read.
	// default: 1m
	SettleWalkInterval time.Duration `koanf:"settle_walk_interval"`
	// DecideWait is how long a part must have been pending, by its node's
	// clock, before the sync lands it (0..1m; 0: at once). A Reserve
	// attempt that takes stock and is then refused gives it back within
	// milliseconds; the sync leaves such parts out of PostgreSQL (package
	// pgsync, "Refused attempts"), which it can tell only once they are
	// given back. Rows land this much later.
	// default: 250ms
	DecideWait time.Duration `koanf:"decide_wait"`
	// RetryBackoff is the wait after a failure (PostgreSQL or the node
	// unreachable) before a node is tried again. Nothing is skipped: the
	// next try resumes from the last committed position.
	// default: 1s
	RetryBackoff time.Duration `koanf:"retry_backoff"`
}

// String formats the sync settings with the DSN's password redacted.
func (s Sync) String() string {
	return fmt.Sprintf("{DSN:%s Listen:%s Batch:%d PollInterval:%v SettleInterval:%v SettleWalkInterval:%v DecideWait:%v RetryBackoff:%v}",
		RedactDSN(s.DSN), s.Listen, s.Batch, s.PollInterval, s.SettleInterval, s.SettleWalkInterval, s.DecideWait, s.RetryBackoff)
}

// RedactDSN returns dsn with its password replaced by "<redacted>", in
// either the URL or the key=value form, for logs and error messages.
func RedactDSN(dsn string) string {
	if dsn == "" {
		return ""
	}
	if isURLDSN(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "<unparsable DSN redacted>"
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), "redacted")
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "redacted")
			u.RawQuery = q.Encode()
		}
		return strings.Replace(u.String(), ":redacted@", ":<redacted>@", 1)
	}
	pairs, ok := scanKV(dsn)
	if !ok {
		if strings.Contains(dsn, "password") {
			return "<unparsable DSN redacted>"
		}
		return dsn
	}
	var b strings.Builder
	at := 0
	for _, p := range pairs {
		if p.key == "password" {
			b.WriteString(dsn[at:p.from])
			b.WriteString("<redacted>")
			at = p.to
		}
	}
	b.WriteString(dsn[at:])
	return b.String()
}

// kvPair is one pair of a key=value DSN: its key, and where its value
// (with its quotes, if any) starts and ends in the DSN.
type kvPair struct {
	key      string
	from, to int
}

// scanKV splits a key=value DSN into its pairs by libpq's rules (pgx's
// parseKeywordValueSettings): a key of non-space characters, spaces
// allowed around '=', then a value single-quoted (a backslash escapes the
// next character) or running to the next space (the same escapes). ok is
// false for anything else: a key without '=', a space inside a key, an
// unterminated quote, a NUL byte.
func scanKV(dsn string) (pairs []kvPair, ok bool) {
	if strings.IndexByte(dsn, 0) >= 0 {
		return nil, false
	}
	const space = " \t\n\r\v\f"
	i := 0
	skip := func() {
		for i < len(dsn) && strings.IndexByte(space, dsn[i]) >= 0 {
			i++
		}
	}
	for skip(); i < len(dsn); skip() {
		eq := strings.IndexByte(dsn[i:], '=')
		if eq < 0 {
			return nil, false
		}
		key := strings.TrimRight(dsn[i:i+eq], space)
		if key == "" || strings.ContainsAny(key, space) {
			return nil, false
		}
		i += eq + 1
		skip()
		from := i
		if i < len(dsn) && dsn[i] == '\'' {
			for i++; i < len(dsn) && dsn[i] != '\''; i++ {
				if dsn[i] == '\\' {
					i++
				}
			}
			if i >= len(dsn) {
				return nil, false // unterminated quote
			}
			i++ // the closing quote
		} else {
			for ; i < len(dsn) && strings.IndexByte(space, dsn[i]) < 0; i++ {
				if dsn[i] == '\\' {
					i++
				}
			}
			i = min(i, len(dsn))
		}
		pairs = append(pairs, kvPair{key: key, from: from, to: i})
	}
	return pairs, true
}

func isURLDSN(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// defaultSync holds the sync defaults.
func defaultSync() Sync {
	return Sync{
		Listen:             "127.0.0.1:7401",
		Batch:              1000,
		PollInterval:       100 * time.Millisecond,
		SettleInterval:     time.Second,
		SettleWalkInterval: time.Minute,
		DecideWait:         250 * time.Millisecond,
		RetryBackoff:       time.Second,
	}
}

// syncProblems checks the sync section's values (the DSN only when set).
func (c *Config) syncProblems(ps *Problems) {
	s := c.Sync
	if s.DSN != "" {
		if msg := dsnProblem(s.DSN); msg != "" {
			ps.add("sync.dsn", s.DSN, msg)
		}
	}
	if s.Listen != "" {
		checkAddr(ps, "sync.listen", s.Listen, true)
	}
	if s.Batch < 1 || s.Batch > 10000 {
		ps.add("sync.batch", s.Batch, "must be 1..10000")
	}
	positive(ps, "sync.poll_interval", s.PollInterval)
	positive(ps, "sync.settle_interval", s.SettleInterval)
	positive(ps, "sync.settle_walk_interval", s.SettleWalkInterval)
	if s.DecideWait < 0 || s.DecideWait > time.Minute {
		ps.add("sync.decide_wait", s.DecideWait.String(), "must be 0s..1m (0s: land parts at once)")
	}
	positive(ps, "sync.retry_backoff", s.RetryBackoff)
}

// dsnProblem says what is wrong with a DSN's form, or "".
func dsnProblem(dsn string) string {
	if isURLDSN(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "not a valid postgres:// URL"
		}
		if u.Host == "" && !u.Query().Has("host") {
			return "the URL names no host"
		}
		return ""
	}
	if strings.Contains(dsn, "://") {
		return "want a postgres:// or postgresql:// URL, or key=value pairs"
	}
	if _, ok := scanKV(dsn); !ok {
		return "want a postgres:// or postgresql:// URL, or key=value pairs (a value with spaces in single quotes)"
	}
	return ""
}

// ValidateSync is [Config.Validate] for `shardis sync`: everything
// Validate checks (the sync reads the inventory's nodes and queues), and
// sync.dsn must be set.
func (c *Config) ValidateSync() error {
	ps := c.problems()
	if c.Sync.DSN == "" {
		ps.add("sync.dsn", nil, "required by shardis sync (set it in the file or with SHARDIS_SYNC__DSN)")
	}
	if len(ps) > 0 {
		return ps
	}
	return nil
}
