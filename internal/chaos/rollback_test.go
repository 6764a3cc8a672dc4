package chaos

import (
	"errors"
	"testing"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// The rollback check holds the node's refusal and its write sequence:
// a node not refused within the wait, one UP again after it was noticed,
// one that applied writes to its older data, and a write sequence that
// could not be read (before, read as 0, which passed the "applied writes"
// check; and "not refused" was only a fault error, which passed the run).
func TestJudgeRollback(t *testing.T) {
	refused := refusal{before: 100, after: 90, now: 90, refused: true, state: v1.NodeState_NODE_STATE_DOWN, reason: "rolled back"}
	timeout := errors.New("i/o timeout")
	for _, tc := range []struct {
		name   string
		mutate func(r *refusal)
		want   string // the violation kind, "" for none
	}{
		{"refused, nothing applied", func(*refusal) {}, ""},
		{"applied writes", func(r *refusal) { r.now = 93 }, "rollback-undetected"},
		{"UP again", func(r *refusal) { r.refused, r.upAgain = false, true }, "rollback-undetected"},
		{"not refused in time", func(r *refusal) { r.refused, r.state, r.reason = false, v1.NodeState_NODE_STATE_UP, "" }, "rollback-undetected"},
		{"sequence unreadable after the wait", func(r *refusal) { r.now, r.nowErr = 0, timeout }, "rollback-unchecked"},
		{"sequence unreadable after the restart", func(r *refusal) { r.after, r.afterErr = 0, timeout }, "rollback-unchecked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := refused
			tc.mutate(&r)
			rep := newReport(Options{})
			judgeRollback(rep, "n2", r)
			switch {
			case tc.want == "" && !rep.OK():
				t.Errorf("violations %+v, want none", rep.Violations)
			case tc.want != "" && rep.ViolationCounts[tc.want] == 0:
				t.Errorf("no %s violation: %+v", tc.want, rep.Violations)
			}
		})
	}
}
