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

// A sentinel's vote newer than its configuration refuses confirmations
// (pending) from the round that first sees it until electionBound of
// its failover-timeout later, counted from that first sight, not from
// each round: an election that never ended (aborted, split votes) stops
// refusing every write. A newer vote starts its own count; a vote the
// configuration caught up with (the switch announced) is forgotten.
func TestAVoteNewerThanTheConfigurationRefusesForOneElection(t *testing.T) {
	const ft = 2 * time.Second
	start := time.Now()
	var r confirmRound
	round := func(at time.Duration, answers ...masterAnswer) []bool {
		r.answers = answers
		r.pendingVotes(start.Add(at))
		var out []bool
		for _, a := range r.answers {
			out = append(out, a.pending)
		}
		return out
	}
	check := func(what string, got []bool, want ...bool) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: pending %v, want %v", what, got, want)
				return
			}
		}
	}
	voted := func(s string, vote int64) masterAnswer {
		return masterAnswer{sentinel: s, config: 3, vote: vote, failoverTimeout: ft}
	}
	bound := electionBound(ft)
	check("first sight", round(0, voted("s1", 4), voted("s2", 3), voted("s3", 2)), true, false, false)
	check("within the bound", round(bound-time.Millisecond, voted("s1", 4), voted("s2", 4)), true, true)
	check("s1 past the bound, s2 seen later", round(bound, voted("s1", 4), voted("s2", 4)), false, true)
	check("a newer election at s1", round(bound+time.Second, voted("s1", 5)), true)
	check("s1's configuration caught up", round(bound+2*time.Second, voted("s1", 3)), false)
	check("the same epoch again after it was forgotten", round(bound+3*time.Second, voted("s1", 5)), true)
}
