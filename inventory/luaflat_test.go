package inventory

import (
	"strings"
	"testing"
)

// flatBody offsets every index of KEYS and ARGV by the call's place, and
// counts as a lone call would, touching nothing else; it refuses an index
// an offset in front would regroup, and the stamp's and header's places.
func TestFlatBody(t *testing.T) {
	for _, c := range [][2]string{
		{"local k = KEYS[2]", "local k = KEYS[kb + 2]"},
		{"x = ARGV[5 + i * 3]", "x = ARGV[ab + 5 + i * 3]"},
		{"for i = 3, #KEYS do f(KEYS[i]) end", "for i = 3, (nk + 1) do f(KEYS[kb + i]) end"},
		{"n = (#ARGV - 4) / 2", "n = ((na + 3) - 4) / 2"},
		{"y = ARGV[tonumber(ARGV[4]) + 1]", "y = ARGV[ab + tonumber(ARGV[ab + 4]) + 1]"},
		{"z = KEYS[(a == b) and 2 or 3]", ""},
		{"plan_parts(KEYS, ARGV, kb + 5, ab + 13)", "plan_parts(KEYS, ARGV, kb + 5, ab + 13)"},
		{"t.KEYS[2] = 'KEYS[2]' -- KEYS[2]\n", "t.KEYS[2] = 'KEYS[2]' -- KEYS[2]\n"},
		{"a = KEYS[i][1]", "a = KEYS[kb + i][1]"},
	} {
		got, err := flatBody(c[0])
		if c[1] == "" {
			if err == nil {
				t.Errorf("flatBody(%q) = %q, want an error", c[0], got)
			}
			continue
		}
		if err != nil || got != c[1] {
			t.Errorf("flatBody(%q) = %q, %v; want %q", c[0], got, err, c[1])
		}
	}
	for _, bad := range []string{"KEYS[1]", "ARGV[3]", "ARGV[2]", "KEYS[a .. b]", "ARGV['x']", "KEYS[x == 1]", "KEYS[a or 2]", "ARGV[i < 3]"} {
		if got, err := flatBody("local v = " + bad); err == nil || !strings.Contains(err.Error(), bad[:4]) {
			t.Errorf("flatBody(%q) = %q, %v; want an error naming it", bad, got, err)
		}
	}
}
