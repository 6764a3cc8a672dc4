package node

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/internal/redistest"
)

// A sentinel that names a master whose run_id it has not learned yet
// (it reads the master's INFO only some time after a switch) answers
// runid "": learnRuns asks the named server itself, so a write that ran
// there is confirmed by its run_id, not refused until the sentinel's
// next INFO; a named address that does not answer stays "" and confirms
// nothing; an answer that has its run_id, or a failover under way, is
// left as it is.
func TestLearnRunsAsksTheNamedServer(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := srv.Client(t)
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := &Node{opts: Options{ProbeTimeout: 2 * time.Second}}
	want := n.serverRun(ctx, srv.Addr())
	if want == "" || !strings.Contains(info, "run_id:"+want) {
		t.Fatalf("serverRun = %q, not the run_id in %q", want, info)
	}
	answers := []masterAnswer{
		{sentinel: "s1", addr: srv.Addr()},
		{sentinel: "s2", addr: srv.Addr()},
		{sentinel: "s3", addr: "127.0.0.1:1"},
		{sentinel: "s4", addr: srv.Addr(), run: "other"},
		{sentinel: "s5", addr: srv.Addr(), failover: true},
	}
	n.learnRuns(ctx, answers)
	for i, wantRun := range []string{want, want, "", "other", ""} {
		if answers[i].run != wantRun {
			t.Errorf("answer of %s: run %q, want %q", answers[i].sentinel, answers[i].run, wantRun)
		}
	}
}
