package chaos

import "testing"

// The chaos report's line for an AOF repair is the one that says what
// redis-check-aof cut, not its closing "valid" line.
func TestRepairLine(t *testing.T) {
	report := "0x              73: Expected to read 3 bytes, got 1 bytes\n" +
		"AOF analyzed: filename=appendonly.aof.1.incr.aof, size=116, ok_up_to=50, ok_up_to_line=27, diff=66\n" +
		"This will shrink the AOF appendonly.aof.1.incr.aof from 116 bytes, with 66 bytes, to 50 bytes\n" +
		"Continue? [y/N]: Successfully truncated AOF appendonly.aof.1.incr.aof\n" +
		"All AOF files and manifest are valid\n"
	if got, want := repairLine(report), "This will shrink the AOF appendonly.aof.1.incr.aof from 116 bytes, with 66 bytes, to 50 bytes"; got != want {
		t.Errorf("repairLine = %q, want %q", got, want)
	}
	if got := repairLine("All AOF files and manifest are valid\n"); got != "All AOF files and manifest are valid" {
		t.Errorf("repairLine of a report without a cut = %q, want its last line", got)
	}
}
