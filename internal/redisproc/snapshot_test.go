package redisproc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartRepairsATornAOF cuts a server's AOF inside the last of a
// script's writes, as a crash in the middle of its write(2) leaves it: the
// script's two INCRBYs are one MULTI … EXEC in the file, and the cut falls
// in the second. Restart must bring the server back with neither write,
// and so must every restart after it, with writes made since: the
// script is all or nothing. With Redis's default, aof-load-truncated yes,
// Redis 7.0 starts without both but keeps the first INCRBY behind an open
// MULTI in the file, and the second restart applies it with the next
// transaction (checked by hand with redis-server 7.0.15: a=1, b unset).
func TestRestartRepairsATornAOF(t *testing.T) {
	t.Parallel()
	s := start(t, Options{AOF: true})
	c := client(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	const script = "redis.call('INCRBY', 'a', 1); redis.call('INCRBY', 'b', 1); return 1"
	if err := c.Eval(ctx, script, nil).Err(); err != nil {
		t.Fatalf("EVAL: %v", err)
	}
	if err := s.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	incr, err := filepath.Glob(filepath.Join(s.Dir(), aofDir, "*.incr.aof"))
	if err != nil || len(incr) != 1 {
		t.Fatalf("incr AOF files: %v, %v; want one", incr, err)
	}
	data, err := os.ReadFile(incr[0])
	if err != nil {
		t.Fatal(err)
	}
	// the second INCRBY: *3 $6 INCRBY $1 b $1 1; cut after its key
	at := bytes.LastIndex(data, []byte("$1\r\nb\r\n"))
	if at < 0 || !bytes.Contains(data[:at], []byte("MULTI")) || !bytes.Contains(data[at:], []byte("EXEC")) {
		t.Fatalf("the script's writes are not one MULTI … EXEC ending in INCRBY b:\n%q", data)
	}
	if err := os.WriteFile(incr[0], data[:at+5], 0o644); err != nil {
		t.Fatal(err)
	}

	if err := s.Restart(); err != nil {
		t.Fatalf("Restart of the torn AOF: %v", err)
	}
	reps := s.AOFRepairs()
	if len(reps) != 1 || !strings.Contains(reps[0], "Successfully truncated") {
		t.Fatalf("AOFRepairs = %q; want one, redis-check-aof's report of a truncation", reps)
	}
	want := func(when string, kv map[string]string) {
		t.Helper()
		for k, v := range kv {
			got, err := c.Get(ctx, k).Result()
			if v == "" {
				if err == nil {
					t.Errorf("%s: %s = %q; want it unset (the torn script is all or nothing)", when, k, got)
				}
				continue
			}
			if err != nil || got != v {
				t.Errorf("%s: %s = %q, %v; want %q", when, k, got, err, v)
			}
		}
	}
	want("after the repair", map[string]string{"before": "1", "a": "", "b": ""})
	if err := c.Eval(ctx, "redis.call('SET', 'c', '1'); redis.call('SET', 'd', '1'); return 1", nil).Err(); err != nil {
		t.Fatalf("EVAL after the repair: %v", err)
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("second Restart: %v", err)
	}
	want("after the next restart", map[string]string{"before": "1", "a": "", "b": "", "c": "1", "d": "1"})
	if n := len(s.AOFRepairs()); n != 1 {
		t.Errorf("AOFRepairs after a clean restart: %d; want still 1", n)
	}
}
