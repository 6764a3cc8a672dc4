package explore

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/inventory"
)

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // dial failures while a node restarts are expected
	os.Exit(m.Run())
}

// ciBudget is how long make test explores (the schedules started by then
// finish after it): a short exploration, well inside 60 s with -race.
const ciBudget = 20 * time.Second

// ciMinRun is how many schedules make test explores at least (two rounds
// of its four worlds), whatever the budget: about 6 s quiet, 25 s on a
// machine busy enough to stretch a schedule to 10 s.
const ciMinRun = 8

// ciOptions are the schedules make test explores: every actor, the
// default fault chances, one call in twenty abandoned by its caller (the
// Abandon fate), the memory actor (oom.go) in one schedule in four and,
// where gcc can build the clock skew library (clock.go), the clock actor
// in one schedule in four, and the operator in one in four, half of them
// with the set-aside actor (aside.go).
func ciOptions() Options {
	opts := Options{Abandon: 0.05, OOM: 0.25, Operator: 0.25, Aside: 0.5}
	if _, err := exec.LookPath("gcc"); err == nil {
		opts.Clock = 0.25
	}
	return opts
}

// TestExploreShort runs the schedules of seeds 1, 2, … for ciBudget on
// four worlds, and at least ciMinRun of them however long they take:
// every invariant must hold in each. (A busy machine ran 6 in the budget,
// 10.5 s each, in ci460: the floor is a count, not a speed.)
func TestExploreShort(t *testing.T) {
	if testing.Short() {
		t.Skip("explores for 20 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	opts := ciOptions()
	sum, err := Explore(ctx, Config{Seed: 1, N: 100000, Budget: ciBudget, MinRun: ciMinRun, Worlds: 4, Options: opts})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	WriteSummary(&b, sum)
	t.Log(b.String())
	for _, r := range sum.Failed {
		var b strings.Builder
		WriteResult(&b, r, opts, true)
		t.Error(b.String())
	}
	if len(sum.WorldErr) > 0 {
		t.Errorf("world errors: %v", sum.WorldErr)
	}
	if sum.Interrupted > 0 {
		t.Errorf("%d schedule(s) still running when the test's 2 minutes ran out (a schedule stops itself after %s)", sum.Interrupted, scheduleLimit)
	}
	if sum.Ran < ciMinRun {
		t.Errorf("only %d schedules ran in %s", sum.Ran, sum.Took.Round(time.Second))
	}
}

// WriteSummary says how many topology applies the schedules ran and how
// many stale order records they retired, so a run shows whether it
// exercised the retirement at all.
func TestWriteSummaryCountsRetirements(t *testing.T) {
	var b strings.Builder
	WriteSummary(&b, Summary{Ran: 3, Applies: 5, Retired: 2, Reinstalled: 1, Losses: 1, Excused: 4})
	for _, want := range []string{"explore: 3 schedules", "5 topology apply(s) ran; they retired 2 stale order record(s), put back 1 and took back 0 counter(s)", "4 violation(s)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	WriteSummary(&b, Summary{Ran: 3})
	if strings.Contains(b.String(), "topology apply") || strings.Contains(b.String(), "interrupted") {
		t.Errorf("summary of a run without applies or interruption names them:\n%s", b.String())
	}
	b.Reset()
	WriteSummary(&b, Summary{Ran: 3, Interrupted: 2})
	if want := "explore: interrupted: 2 schedule(s) cut short, not counted"; !strings.Contains(b.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, b.String())
	}
}

// A look stopped by its caller (an interrupt, a deadline) counts the
// schedule it cut short as interrupted: not run, not failed, and not a
// world error (each interrupt of `make explore` reported one per world).
func TestExploreInterruptedIsNotAWorldError(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four redis-server nodes")
	}
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	// mid-schedule: the world is up well before (four nodes start in
	// under a second, a few on a loaded machine), and it runs schedules
	// back to back, each of seconds (most of them waiting for deadlines)
	time.AfterFunc(5*time.Second, cancel)
	sum, err := Explore(ctx, Config{Seed: 1, N: 1000, Worlds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.WorldErr) > 0 || len(sum.Failed) > 0 || sum.Interrupted != 1 {
		t.Errorf("interrupted look: world errors %v, %d failed, %d interrupted; want none, none, 1", sum.WorldErr, len(sum.Failed), sum.Interrupted)
	}
}

// A failing seed's replay line names every option that changes its
// draws, the moved order's chance, the twin's, the second loss's, the shrink's, the rejoin's, the abandoned calls', the clock
// actor's, the memory actor's, the operator's and the set-aside actor's included: without them
// the seed replays another schedule.
func TestReplayCommandNamesEveryOption(t *testing.T) {
	opts := Options{Profile: "calm", Topology: 1, Restart: -1, Limit: -1, Inline: -1, Loss: 1, Moved: 1,
		Mutations: []inventory.Mutation{inventory.MutationRetireSkip}}
	want := "make explore SEED=2 N=1 MUTATIONS=retire-skip PROFILE=calm TOPOLOGY=1 RESTART=-1 LIMIT=-1 INLINE=-1 LOSS=1 MOVED=1"
	if got := ReplayCommand(2, opts); got != want {
		t.Errorf("ReplayCommand = %q, want %q", got, want)
	}
	for _, c := range []struct {
		what string
		set  func(*Options)
		tail string
	}{
		{"a twin", func(o *Options) { o.Twin = 0.5 }, " TWIN=0.5"},
		{"a second loss", func(o *Options) { o.Loss2 = 0.5 }, " LOSS2=0.5"},
		{"the shrink of route c", func(o *Options) { o.Shrink = 1 }, " SHRINK=1"},
		{"the rejoin", func(o *Options) { o.Rejoin = 0.7 }, " REJOIN=0.7"},
		{"abandoned calls", func(o *Options) { o.Abandon = 0.05 }, " ABANDON=0.05"},
		{"the clock actor", func(o *Options) { o.Clock = 0.3 }, " CLOCK=0.3"},
		{"the clock actor's larger steps", func(o *Options) { o.Clock, o.ClockStep = 0.3, 2*time.Second }, " CLOCK=0.3 CLOCKSTEP=2s"},
		{"the memory actor", func(o *Options) { o.OOM = 0.3 }, " OOM=0.3"},
		{"the operator actor", func(o *Options) { o.Operator = 0.5 }, " OPERATOR=0.5"},
		{"the set-aside actor", func(o *Options) { o.Operator, o.Aside = 0.5, 0.5 }, " OPERATOR=0.5 ASIDE=0.5"},
	} {
		o := opts
		c.set(&o)
		if got := ReplayCommand(2, o); got != want+c.tail {
			t.Errorf("ReplayCommand with %s = %q, want %q", c.what, got, want+c.tail)
		}
	}
}
