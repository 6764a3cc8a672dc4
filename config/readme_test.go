package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shardis/shardis/config"
)

// The README's configuration reference is a configuration: copied as it
// stands (its one CA file made to exist), it loads with no problem. It
// once held `hold_back: 0`, which the loader refused.
func TestReadmeReferenceLoads(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	const head = "## Configuration reference\n\n```yaml\n"
	s := string(b)
	i := strings.Index(s, head)
	if i < 0 {
		t.Fatalf("README.md has no %q", head)
	}
	s = s[i+len(head):]
	s = s[:strings.Index(s, "```")]
	ca := filepath.Join(t.TempDir(), "redis-ca.pem")
	if err := os.WriteFile(ca, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s, "/etc/shardis/redis-ca.pem") {
		t.Fatal("the reference no longer names /etc/shardis/redis-ca.pem: update this test")
	}
	s = strings.ReplaceAll(s, "/etc/shardis/redis-ca.pem", ca)
	if _, err := config.Parse([]byte(s), nil); err != nil {
		t.Fatalf("README's configuration reference does not load:\n%v", err)
	}
}
