package node_test

import (
	"strings"
	"testing"

	"github.com/shardis/shardis/node"
)

// The settings' verdicts, case by case: what is durable, what is safe,
// and what the warning names.
func TestSettingsVerdicts(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name          string
		s             node.Settings
		durable, safe bool
		torn          bool
		warn          []string // substrings of Warning; none: ""
	}{
		{"safe", node.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always", AOFLoadTruncated: "no"}, true, true, false, nil},
		{"redis default loader", node.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always", AOFLoadTruncated: "yes"}, true, false, true,
			[]string{"aof-load-truncated yes", "redis-check-aof --fix"}},
		{"loader unknown", node.Settings{MaxmemoryPolicy: "noeviction", AppendOnly: "yes", AppendFsync: "always"}, true, false, false, nil},
		{"everysec and default loader", node.Settings{AppendOnly: "yes", AppendFsync: "everysec", AOFLoadTruncated: "yes"}, false, false, true,
			[]string{"appendfsync everysec", "; aof-load-truncated yes"}},
		{"no AOF", node.Settings{AppendOnly: "no", AppendFsync: "always", AOFLoadTruncated: "yes"}, false, false, false, []string{"appendonly no"}},
		{"evicts", node.Settings{MaxmemoryPolicy: "allkeys-lru", AppendOnly: "yes", AppendFsync: "always", AOFLoadTruncated: "no"}, true, true, false,
			[]string{"allkeys-lru can evict keys"}},
	} {
		if got := c.s.Durable(); got != c.durable {
			t.Errorf("%s: Durable = %v; want %v", c.name, got, c.durable)
		}
		if got := c.s.Safe(); got != c.safe {
			t.Errorf("%s: Safe = %v; want %v", c.name, got, c.safe)
		}
		if got := c.s.LoadsTornScripts(); got != c.torn {
			t.Errorf("%s: LoadsTornScripts = %v; want %v", c.name, got, c.torn)
		}
		w := c.s.Warning()
		if len(c.warn) == 0 && w != "" {
			t.Errorf("%s: Warning = %q; want none", c.name, w)
		}
		for _, sub := range c.warn {
			if !strings.Contains(w, sub) {
				t.Errorf("%s: Warning = %q; want it to name %q", c.name, w, sub)
			}
		}
	}
}
