package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shardis/shardis/internal/redistest"
)

// functions show lists another release's library, prune --dry-run names
// it without deleting, prune deletes it; a node that is down is reported
// and fails the command; usage mistakes exit 2.
func TestFunctionsCLI(t *testing.T) {
	srvs := redistest.StartN(t, 2, redistest.Options{})
	c := srvs[0].Client(t)
	old := "shardis_stock_0123456789abcdef"
	lib := "#!lua name=" + old + "\nredis.register_function('" + old + "', function() return 1 end)\n"
	if err := c.FunctionLoad(context.Background(), lib).Err(); err != nil {
		t.Fatal(err)
	}
	cfg := writeTopoConfig(t, "c.yaml", []string{srvs[0].Addr(), srvs[1].Addr()}, "n1", "n2")
	sh := func(args ...string) (string, int) {
		var out, errb bytes.Buffer
		code := run(args, strings.NewReader(""), &out, &errb)
		return out.String() + errb.String(), code
	}
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"functions", "show", "--config", cfg}, 0, "1 of other releases: " + old},
		{[]string{"functions", "prune", "--config", cfg, "--dry-run"}, 0, "1 of other releases, would delete: " + old},
		{[]string{"functions", "prune", "--config", cfg}, 0, "1 of other releases, deleted: " + old},
		{[]string{"functions", "show", "--config", cfg}, 0, "n1           0 of this release's loaded; 0 of other releases\n"},
		{[]string{"functions"}, 2, "needs the subcommand show or prune"},
		{[]string{"functions", "show"}, 2, "needs --config"},
		{[]string{"functions", "show", "--config", cfg, "--dry-run"}, 2, "flag provided but not defined"},
	}
	for _, s := range steps {
		if out, code := sh(s.args...); code != s.code || !strings.Contains(out, s.want) {
			t.Fatalf("%v = %d:\n%s\nwant %d and %q", s.args, code, out, s.code, s.want)
		}
	}
	srvs[1].Kill()
	if out, code := sh("functions", "show", "--config", cfg); code != 1 || !strings.Contains(out, "n2 ") || !strings.Contains(out, "1 of 2 nodes not done") {
		t.Fatalf("show with n2 down = %d:\n%s", code, out)
	}
}
