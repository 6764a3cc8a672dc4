package pgsync_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/shardis/shardis/pgsync"
)

// During a PostgreSQL outage with nothing new to land,
// shardis_sync_database_up (and Syncer.DatabaseUp) goes to 0; parts
// reserved during the outage land promptly once it is back, although
// the retry backoff is long (the workers wake when the database answers
// again); and the recovery is logged when it happens, with the outage's
// real duration.
func TestSyncDatabaseOutage(t *testing.T) {
	t.Parallel()
	e := newEnvOwnPG(t, false)
	skus := [][2]string{{"all", "a"}}
	e.loadStock("all", "a", 1000)
	e.reserveN("before", "all", "a", 6, time.Minute)
	m := pgsync.NewMetrics(nil)
	var logs logBuf
	st := e.openSyncer(logs.logger(), pgsync.Settings{Metrics: m, RetryBackoff: 10 * time.Second})
	e.waitConsistent(10*time.Second, skus, nil)
	if m.DatabaseUp() != 1 || !st.Syncer.DatabaseUp() {
		t.Fatalf("database_up %v (DatabaseUp %v) with PostgreSQL running, want 1", m.DatabaseUp(), st.Syncer.DatabaseUp())
	}

	stopped := time.Now()
	if err := e.pg.Stop(); err != nil {
		t.Fatal(err)
	}
	// Nothing new to land: only the pending parts' re-check and the
	// probe touch the database.
	waitFor(t, 5*time.Second, "database_up to go to 0 while PostgreSQL is stopped", func() bool {
		return m.DatabaseUp() == 0 && !st.Syncer.DatabaseUp()
	})
	e.reserveN("during", "all", "a", 6, time.Minute) // lands only after the outage
	time.Sleep(time.Second)                          // the outage goes on
	if err := e.pg.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	waitFor(t, 3*time.Second, "database_up to be 1 again", func() bool { return m.DatabaseUp() == 1 && st.Syncer.DatabaseUp() })
	// The workers failed with a 10s backoff; they must not wait it out.
	e.waitConsistent(4*time.Second, skus, nil)
	t.Logf("stopped for %v; landed %v after PostgreSQL restarted", restarted.Sub(stopped).Round(time.Millisecond), time.Since(restarted).Round(time.Millisecond))

	back := logs.lines("PostgreSQL answers again")
	if len(back) != 1 {
		t.Fatalf("%d recovery lines, want 1; log:\n%s", len(back), logs.String())
	}
	at, _ := time.Parse(time.RFC3339Nano, fmt.Sprint(back[0]["time"]))
	ns, ok := back[0]["after"].(float64) // slog's JSON writes a duration in ns
	if !ok {
		t.Fatalf("recovery line %v: no after", back[0])
	}
	after := time.Duration(ns)
	if d := at.Sub(restarted); d > 2*time.Second {
		t.Errorf("recovery logged %v after PostgreSQL restarted, want promptly", d)
	}
	// The outage as the sync saw it: from its first failure (after the
	// stop) to its first success (after the restart).
	if lo, hi := restarted.Sub(stopped)-2*time.Second, at.Sub(stopped); after < lo || after > hi {
		t.Errorf("recovery line says after=%v; the outage lasted %v (PostgreSQL stopped to restarted), logged at +%v",
			after, restarted.Sub(stopped).Round(time.Millisecond), at.Sub(stopped).Round(time.Millisecond))
	}
	if down := logs.lines("PostgreSQL unreachable"); len(down) != 1 {
		t.Errorf("%d outage lines, want 1", len(down))
	}
}
