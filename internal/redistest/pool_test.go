package redistest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server with the zero Options goes back to the pool when its test ends
// and the next Start gets it as new: on another port (a client of the
// earlier test that dials again is refused, one still connected is cut
// off), without the earlier test's keys, functions, scripts, statistics,
// configuration changes or files. A server its test killed is not reused.
func TestPoolHandsOnAServerAsNew(t *testing.T) {
	var firstAddr, firstPid, killedPid string
	var leftOver *redis.Client
	t.Run("first", func(t *testing.T) {
		s := Start(t, Options{})
		ctx := ctxT(t)
		c := s.Client(t)
		firstAddr, firstPid = s.Addr(), pidOf(t, c)
		for _, cmd := range [][]any{
			{"SET", "k", "v"},
			{"FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function('f', function() return 1 end)"},
			{"SCRIPT", "LOAD", "return 1"},
			{"CONFIG", "SET", "maxmemory", "1gb"},
			{"SAVE"},
		} {
			if err := c.Do(ctx, cmd...).Err(); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
		if _, err := os.Stat(filepath.Join(s.Dir(), "dump.rdb")); err != nil {
			t.Fatal(err)
		}
		// a client of this test's that outlives it
		leftOver = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		if err := leftOver.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	})
	defer leftOver.Close()
	t.Run("second", func(t *testing.T) {
		s := Start(t, Options{})
		ctx := ctxT(t)
		c := s.Client(t)
		if pid := pidOf(t, c); pid != firstPid {
			t.Fatalf("the second Start got process %s, want the first test's %s back from the pool", pid, firstPid)
		}
		if s.Addr() == firstAddr {
			t.Errorf("the server reused kept its address %s", firstAddr)
		}
		if n := c.DBSize(ctx).Val(); n != 0 {
			t.Errorf("DBSIZE = %d, want 0", n)
		}
		if libs := c.FunctionList(ctx, redis.FunctionListQuery{}).Val(); len(libs) != 0 {
			t.Errorf("FUNCTION LIST = %v, want none", libs)
		}
		if ok := c.ScriptExists(ctx, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db").Val(); len(ok) != 1 || ok[0] {
			t.Errorf("SCRIPT EXISTS of the earlier test's script = %v, want false", ok)
		}
		if v := c.ConfigGet(ctx, "maxmemory").Val()["maxmemory"]; v != "0" {
			t.Errorf("maxmemory = %q, want 0 as at start", v)
		}
		if _, err := os.Stat(filepath.Join(s.Dir(), "dump.rdb")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dump.rdb of the earlier test: %v, want it gone", err)
		}
		if err := leftOver.Ping(ctx).Err(); err == nil {
			t.Errorf("a client of the earlier test still reaches the server")
		}
		if conn, err := net.DialTimeout("tcp", firstAddr, 200*time.Millisecond); err == nil {
			conn.Close()
			t.Errorf("the earlier address %s still accepts connections", firstAddr)
		}
		s.Kill() // not back to the pool
		killedPid = firstPid
	})
	t.Run("third", func(t *testing.T) {
		s := Start(t, Options{})
		if pid := pidOf(t, s.Client(t)); pid == killedPid {
			t.Fatalf("Start handed out the killed server's process %s", pid)
		}
	})
}

func pidOf(t *testing.T, c *redis.Client) string {
	t.Helper()
	info, err := c.InfoMap(ctxT(t), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	return info["Server"]["process_id"]
}
