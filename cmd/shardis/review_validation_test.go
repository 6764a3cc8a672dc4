package main

import (
	"strings"
	"testing"
)

// Values outside what a flag's help documents are usage errors naming
// the flag, not silently replaced: stock load --limit takes 0 (remove),
// -1 (keep, the default) or a positive limit; topology apply --wait a
// duration that is not negative.
func TestReviewFlagValuesValidated(t *testing.T) {
	addr, _ := startService(t, "")
	code, out, errOut := cli(t, "stock", "load", "--addr", addr, "--route", "clothes", "--sku", "cap", "--qty", "5", "--limit", "-5")
	if code != 2 || !strings.Contains(errOut, "--limit -5") {
		t.Errorf("stock load --limit -5: exit %d, stdout %q, stderr %q; want exit 2 naming --limit -5", code, out, lastLine(errOut))
	}
	// Nothing was loaded by the refused call.
	if out := ok(t, addr, "stock", "get", "--route", "clothes", "--sku", "cap"); !strings.Contains(out, "loaded 0") {
		t.Errorf("a refused stock load loaded stock:\n%s", out)
	}
	code, _, errOut = cli(t, "topology", "apply", "--config", "/nonexistent.yaml", "--wait", "-1s")
	if code != 2 || !strings.Contains(errOut, "--wait -1s") {
		t.Errorf("topology apply --wait -1s: exit %d, stderr %q; want exit 2 naming --wait -1s", code, lastLine(errOut))
	}
}

// "shardis COMMAND -h" lists a command's flags and subcommands (README,
// CLI): redo-log -h names redo-log ack.
func TestReviewRedoLogHelpNamesAck(t *testing.T) {
	code, _, errOut := cli(t, "redo-log", "-h")
	if code != 0 || !strings.Contains(errOut, "redo-log ack") {
		t.Errorf("redo-log -h: exit %d; want exit 0 and its subcommand redo-log ack named:\n%s", code, errOut)
	}
}
