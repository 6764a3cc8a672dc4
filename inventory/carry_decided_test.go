package inventory

import (
	"errors"
	"testing"
	"time"
)

// A carried commit (carry.go) waits in its instance's buffer while
// another instance decides the order: a Confirm, a Cancel, or the
// reconciler once its parts come due, each meeting the staging record
// and deciding it first (resolveStaged). The group that carries the
// commit afterwards must leave the decided record as it is (the exact
// staging value is gone), and the commit sent by itself must change
// nothing either: every part settled once, by the one decision, and the
// stock adding up.
func TestCarriedCommitAfterAnotherInstanceDecided(t *testing.T) {
	t.Parallel() // its cases have nodes of their own; they mostly wait a deadline out
	cases := []struct {
		name   string
		ttl    time.Duration
		decide func(e *stagedEnv, other *Inventory, id string)
		want   string
	}{
		{"confirm", time.Minute, func(e *stagedEnv, other *Inventory, id string) {
			if out, err := other.Confirm(e.ctx, id); err != nil || out.Status != StatusConfirmed {
				e.t.Fatalf("Confirm %s on the other instance = %+v, %v", id, out, err)
			}
		}, "confirmed"},
		{"cancel", time.Minute, func(e *stagedEnv, other *Inventory, id string) {
			if out, err := other.Cancel(e.ctx, id); err != nil || out.Status != StatusCancelled {
				e.t.Fatalf("Cancel %s on the other instance = %+v, %v", id, out, err)
			}
		}, "cancelled"},
		{"retry", time.Minute, func(e *stagedEnv, other *Inventory, id string) {
			// a retry of the order id on the other instance meets the
			// staging record (its own stage answers "existing"), decides
			// it and answers the first attempt's receipts
			res, err := other.Reserve(e.ctx, id, stagedItems(), "", time.Minute)
			if err != nil || len(res.Receipts) != 3 {
				e.t.Fatalf("retry of %s on the other instance = %+v, %v", id, res, err)
			}
		}, "reserved"},
		{"expiry", stagedTTL, func(e *stagedEnv, other *Inventory, id string) {
			time.Sleep(stagedTTL + partGrace + 100*time.Millisecond)
			for _, n := range other.Nodes() {
				due, err := other.DueParts(e.ctx, n, 100)
				if err != nil {
					e.t.Fatal(err)
				}
				for _, p := range due {
					if _, err := other.ResolveExpired(e.ctx, p); err != nil {
						e.t.Fatalf("ResolveExpired %+v: %v", p, err)
					}
				}
			}
		}, "cancelled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := carryEnv(t, time.Minute)
			id := "o-carry-" + tc.name
			if _, err := e.inv.Reserve(e.ctx, id, stagedItems(), "", tc.ttl); err != nil {
				t.Fatal(err)
			}
			home, err := e.inv.orderHome(e.inv.topo.cur.Load(), id)
			if err != nil {
				t.Fatal(err)
			}
			if st := orderFieldsOn(t, e.ctx, e.clients[home.Name()], id)["status"]; st != "staging" {
				t.Fatalf("order %s is %s with its commit buffered, want staging", id, st)
			}
			other := e.faultyInstance(&crashPoint{}) // no buffer of its own for id
			tc.decide(e, other, id)
			// the buffered commit rides the next write group on its home
			if err := e.writeGroup(home); err != nil {
				t.Fatal(err)
			}
			e.inv.Close() // and the one sent by itself, if any, lands
			e.wantCarried(0, " (the order was decided before the group)")
			e.verify(id, tc.want)
			if tc.want == "cancelled" {
				if _, err := e.inv.Confirm(e.ctx, id); !errors.Is(err, ErrCancelled) && !errors.Is(err, ErrExpired) {
					t.Errorf("Confirm of %s after it was %s: %v", id, tc.want, err)
				}
			}
			want := tc.want
			if want == "reserved" {
				// still reserved, once: its Confirm confirms the first
				// attempt's parts
				if out, err := e.inv.Confirm(e.ctx, id); err != nil || out.Status != StatusConfirmed {
					t.Fatalf("Confirm %s = %+v, %v", id, out, err)
				}
				want = "confirmed"
			}
			e.expireAll()
			e.verify(id, want)
			e.stock()
		})
	}
}
