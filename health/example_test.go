package health_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/shardis/shardis/health"
)

// pingTarget is a minimal [health.Target]: its probe always succeeds, and it
// starts DOWN, as a node that was not probed yet.
type pingTarget struct {
	name string
	up   atomic.Bool
}

func (p *pingTarget) Name() string                    { return p.name }
func (p *pingTarget) Probe(ctx context.Context) error { return ctx.Err() }
func (p *pingTarget) SetUp() bool                     { return !p.up.Swap(true) }
func (p *pingTarget) SetDown(error) bool              { return p.up.Swap(false) }

func ExampleNew() {
	s := health.New([]health.Target{&pingTarget{name: "redis-a"}}, health.Settings{
		Heartbeat: time.Minute, // one probe in this example
		OnChange: func(e health.Event) {
			state := "DOWN"
			if e.Up {
				state = "UP"
			}
			fmt.Printf("%s is %s (failed probes: %d)\n", e.Target, state, e.FailedProbes)
		},
	})
	defer s.Close()

	<-s.Ready() // every target probed once; their events were delivered
	failed, _, _ := s.Status("redis-a")
	fmt.Println("consecutive failures:", failed)
	// Output:
	// redis-a is UP (failed probes: 0)
	// consecutive failures: 0
}
