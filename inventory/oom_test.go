package inventory

import (
	"errors"
	"strings"
	"testing"

	"github.com/shardis/shardis/node"
)

// An OOM reply is typed and named: ErrOutOfMemory and ErrUnavailable, the
// node, its limit (unknown here: the node cannot be reached for it), and
// the reply; it is never a reason to set a part aside.
func TestNodeErrOutOfMemory(t *testing.T) {
	n, err := node.New(node.Options{Name: "n2", Addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	reply := replyErr("OOM command not allowed when used memory > 'maxmemory'. script: 3f97, on @user_script:237.")
	got := nodeErr(n, reply)
	for _, want := range []error{ErrOutOfMemory, ErrUnavailable, reply} {
		if !errors.Is(got, want) {
			t.Errorf("nodeErr(OOM) = %v: does not wrap %v", got, want)
		}
	}
	if errors.Is(got, ErrCorrupt) || Unsettleable(got) {
		t.Errorf("nodeErr(OOM) = %v: corrupt or unsettleable, want transient", got)
	}
	if msg := got.Error(); !strings.HasPrefix(msg, "node n2 is out of memory (maxmemory unknown): OOM command not allowed") {
		t.Errorf("nodeErr(OOM) says %q", msg)
	}
	if got := nodeErr(n, replyErr("BUSY Redis is busy running a script")); errors.Is(got, ErrOutOfMemory) {
		t.Errorf("nodeErr(BUSY) = %v: wraps ErrOutOfMemory", got)
	}
}

// Each script declares the rule oom.go states for it.
func TestScriptMemoryRules(t *testing.T) {
	for _, c := range []struct {
		s    *luaScript
		want memRule
	}{
		{reserveScript, memGrow}, {localScript, memGrow}, {stageTakeScript, memGrow}, {orderScript, memGrow}, {loadScript, memGrow},
		{settleScript, memRelease}, {orderDecideScript, memRelease}, {probeScript, memRelease}, {pendingAdjustScript, memRelease},
		{pendingDueScript, memRead}, {stockScript, memRead},
	} {
		if c.s.mem != c.want || c.s.write != (c.want != memRead) {
			t.Errorf("script %s: rule %d (write %v), want %d (%q)", c.s.name, c.s.mem, c.s.write, c.want, c.want.shebang())
		}
	}
}
