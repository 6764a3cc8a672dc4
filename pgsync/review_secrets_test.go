package pgsync_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/internal/pgtest"
	"github.com/shardis/shardis/pgsync"
)

// A sync.dsn in key=value form that config accepts but pgx cannot parse
// (here a mistyped sslmode) is refused by Connect with an error that
// `shardis sync` prints and logs. pgx's own redaction of the DSN in that
// error is a pair of regular expressions (password='…' and password=…):
// it misses libpq's other spellings, so a password written with spaces
// around '=' was shown whole, and one holding an escaped quote or an
// escaped space was cut at it and its tail shown. None of the password
// may reach the error.
func TestReviewSecretsConnectParseErrorRedactsDSN(t *testing.T) {
	t.Parallel() // its own server
	const pw = "Pgpw-Review-tail 9x'Zq"
	srv := pgtest.Start(t, pw)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := fmt.Sprintf("host=127.0.0.1 port=%d user=shardis dbname=%s", srv.Port(), pgtest.DB)
	quoted := `'Pgpw-Review-tail 9x\'Zq'` // the password, quoted and escaped by libpq's rules
	set := pgsync.Settings{RetryBackoff: 100 * time.Millisecond, Logger: quiet()}
	// The form is right: with a valid sslmode the real server takes it.
	good := base + " sslmode=disable password = " + quoted
	if _, err := config.Parse([]byte("sync: {dsn: \"\"}"), []string{"SHARDIS_SYNC__DSN=" + good}); err != nil &&
		strings.Contains(err.Error(), "sync.dsn") {
		t.Fatalf("config refuses the DSN: %v", err)
	}
	pool, err := pgsync.Connect(ctx, good, 1, set, true)
	if err != nil {
		t.Fatalf("Connect with the valid DSN: %v", err)
	}
	pool.Close()
	for _, spelling := range []string{
		"password = " + quoted,
		"password=" + quoted,
		`password=Pgpw-Review-tail\ 9x\'Zq`,
	} {
		dsn := base + " " + spelling + " sslmode=verify_ful"
		_, err := pgsync.Connect(ctx, dsn, 1, set, false)
		if err == nil {
			t.Fatalf("Connect(%q): no error, want sslmode refused", spelling)
		}
		for _, piece := range []string{"Pgpw", "Review", "tail", "9x", "Zq"} {
			if strings.Contains(err.Error(), piece) {
				t.Errorf("Connect with %q: error shows the password (%q): %v", spelling, piece, err)
			}
		}
		if !strings.Contains(err.Error(), "sslmode") {
			t.Errorf("Connect with %q: error %q does not say what is wrong (sslmode)", spelling, err)
		}
	}
}
