package drill

import (
	"os/exec"
	"strings"
	"testing"
)

// drillSh runs script under bash after defining the functions of
// docker/drill.sh whose first lines match defs (sed addresses), with
// args as $1…; it returns the output and the exit error.
func drillSh(t *testing.T, defs []string, script string, args ...string) (string, error) {
	t.Helper()
	var prelude strings.Builder
	for _, d := range defs {
		prelude.WriteString(`eval "$(sed -n '` + d + `p' ../../docker/drill.sh)"` + "\n")
	}
	cmd := exec.Command("bash", append([]string{"-c", prelude.String() + script, "bash"}, args...)...)
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("bash: %v", err)
	}
	return string(out), err
}

// stockFieldDef selects stock_field in docker/drill.sh.
const stockFieldDef = `/^stock_field()/,/^}/`

// docker/drill.sh reads GetStock's counters with stock_field, from the
// stock object only (the per-node list has fields of the same names),
// whether or not protojson put a space after each comma (it does for
// about half of all binaries: internal/detrand, seeded by a hash of the
// executable) and whatever a node's error says. Found by a review: it
// split the reply on ',' and matched `"field":"N"` at a line's start, so
// the spaced reply of a shardis binary read 0 for every counter, healed
// passed at once and the drill failed with "VIOLATION: loaded 0"; it cut
// the node list at the first ']', which an error naming [::1] holds.
func TestDrillShStockFieldReadsSpacedAndCompactReplies(t *testing.T) {
	const spaced = `{"stock":{"skuId":"drill-1", "available":"99999", "reserved":"1", "nodes":[{"node":"n1", "reachable":true, "available":"33333", "loaded":"33333"}, {"node":"n2", "reachable":true, "available":"33333", "reserved":"1", "loaded":"33334"}, {"node":"n3", "error":"dial tcp [::1]:6379: connect: refused {\"x\"}"}], "loaded":"100000"}}`
	compact := strings.ReplaceAll(spaced, `", "`, `","`)
	compact = strings.ReplaceAll(compact, `, {`, `,{`)
	compact = strings.ReplaceAll(compact, `, "`, `,"`)
	if strings.Contains(compact, ", ") {
		t.Fatalf("compact reply still spaced: %s", compact)
	}
	script := `for f in available reserved confirmed loaded; do printf '%s=%s ' "$f" "$(stock_field "$1" "$f")"; done`
	for name, reply := range map[string]string{"spaced": spaced, "compact": compact} {
		out, err := drillSh(t, []string{stockFieldDef}, script, reply)
		if err != nil {
			t.Fatalf("%s reply: %v: %s", name, err, out)
		}
		if got, want := strings.TrimSpace(out), "available=99999 reserved=1 confirmed=0 loaded=100000"; got != want {
			t.Errorf("stock_field of the %s GetStock reply: got %q, want %q", name, got, want)
		}
	}
}

// A GetStock that fails (curl prints nothing, or the service answers a
// Connect error) is no stock reply: stock_field fails without printing
// and healed does not pass on it, while a reply with nothing reserved
// (protojson omits the zero field) heals. Found by a review: an empty or
// error reply read as reserved 0, so a drill whose service stopped
// answering passed its healing wait at once.
func TestDrillShFailedStockReadIsNotHealed(t *testing.T) {
	for _, reply := range []string{"", `{"code":"unavailable", "message":"stock: node n1 down"}`} {
		out, err := drillSh(t, []string{stockFieldDef}, `stock_field "$1" reserved`, reply)
		if err == nil || out != "" {
			t.Errorf("stock_field of %q: printed %q, err %v; want nothing and a failure", reply, out, err)
		}
		out, err = drillSh(t, []string{stockFieldDef, `/^healed()/`}, `reply=$1; stock() { printf '%s' "$reply"; }; healed`, reply)
		if err == nil {
			t.Errorf("healed with GetStock answering %q: passed (%s), want not healed", reply, out)
		}
	}
	out, err := drillSh(t, []string{stockFieldDef, `/^healed()/`}, `reply=$1; stock() { printf '%s' "$reply"; }; healed`,
		`{"stock":{"skuId":"drill-1", "available":"100000", "loaded":"100000"}}`)
	if err != nil {
		t.Errorf("healed with nothing reserved: %v: %s", err, out)
	}
}

// docker/drill.sh's load writes one line per Reserve: call's HTTP code
// and load's newline, "000" when the call got no answer (curl's -w prints
// it). Found by a review: `|| echo 000` printed a second "000" and a
// newline after curl's, so a refused Reserve was counted as two failures
// ("000000" and an empty line).
func TestDrillShCallPrintsOneCodePerRefusedCall(t *testing.T) {
	out, err := drillSh(t, []string{`/^call()/`}, `S=http://127.0.0.1:1; H='Content-Type: application/json'
call InventoryService/Reserve '{}'; echo`)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out != "000\n" {
		t.Fatalf("one Reserve against a closed port wrote %q to the codes file, want \"000\\n\"", out)
	}
}
