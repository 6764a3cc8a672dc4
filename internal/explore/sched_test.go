package explore

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/shardis/shardis/inventory"
)

// An abandoned call answers its caller at once with an unknown outcome;
// the caller goes on, and its next call is sent before the abandoned one,
// which is still sent, once, before Run returns.
func TestAbandonedCallIsOvertakenByItsCallersNext(t *testing.T) {
	s := NewScheduler(1, Probs{Abandon: 1}, nil)
	var (
		mu   sync.Mutex
		sent []string
		errA error
	)
	note := func(what string) func() (any, error) {
		return func() (any, error) {
			mu.Lock()
			defer mu.Unlock()
			sent = append(sent, what)
			return what, nil
		}
	}
	s.Go(context.Background(), "caller", func(ctx context.Context) {
		_, errA = s.Call(ctx, inventory.ScriptCall{Node: "n1", Script: "stage-take", Write: true}, note("first"))
		_ = s.Step(ctx, "second", func() error { _, err := note("second")(); return err })
	})
	s.Run()
	s.Wait()
	if !errors.Is(errA, errAbandoned) {
		t.Errorf("the abandoned call answered %v, want errAbandoned", errA)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 2 || sent[0] != "second" || sent[1] != "first" {
		t.Errorf("sent %v, want [second first]: the caller's next call first, the abandoned one after it", sent)
	}
}
