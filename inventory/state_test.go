package inventory

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The order diagram of state.go, edge for edge.
var orderEdges = [][2]OrderState{
	{OrderMissing, OrderReserving},   // begin
	{OrderMissing, OrderStaging},     // stage
	{OrderMissing, OrderReserved},    // the one-script local path
	{OrderMissing, OrderCancelled},   // cancel: a tombstone
	{OrderMissing, OrderFailed},      // expire of a due part whose attempt left no record
	{OrderReserving, OrderReserving}, // begin after the lease ran out: take over
	{OrderReserving, OrderReserved},  // commit
	{OrderReserving, OrderFailed},    // fail; confirm or expire after the lease
	{OrderReserving, OrderCancelled}, // cancel
	{OrderStaging, OrderReserved},    // commit
	{OrderStaging, OrderFailed},      // fail
	{OrderStaging, OrderMissing},     // withdraw: the attempt took nothing anywhere
	{OrderReserved, OrderConfirmed},  // confirm
	{OrderReserved, OrderCancelled},  // cancel, expire, confirm past the deadline
	{OrderFailed, OrderReserving},    // begin takes a failed record over
	{OrderFailed, OrderReserved},     // the local path takes a failed record over
	{OrderFailed, OrderCancelled},    // cancel
}

// The part diagram of state.go, edge for edge.
var partEdges = [][2]PartState{
	{PartMissing, PartPending},   // take
	{PartMissing, PartCancelled}, // tombstone: cancel, abort or prevent of an absent part
	{PartPending, PartConfirmed}, // settle confirm
	{PartPending, PartCancelled}, // settle cancel or abort
}

func TestOrderStateTransitions(t *testing.T) {
	all := append([]OrderState{OrderMissing}, orderStates...)
	for _, from := range all {
		for _, to := range all {
			want := slices.Contains(orderEdges, [2]OrderState{from, to})
			if got := from.CanMoveTo(to); got != want {
				t.Errorf("%v.CanMoveTo(%v) = %v, want %v (state.go's diagram)", from, to, got, want)
			}
		}
	}
	// A few forbidden moves, spelled out: the ones a bug would make.
	for _, e := range [][2]OrderState{
		{OrderConfirmed, OrderCancelled}, // a sale undone
		{OrderCancelled, OrderConfirmed}, // returned stock sold
		{OrderCancelled, OrderReserving}, // a tombstone taken over
		{OrderStaging, OrderStaging},     // a stage over a record (safety issue A1)
		{OrderFailed, OrderStaging},      // a stage over a failed record (A1)
		{OrderStaging, OrderCancelled},   // a staging record decided by anything but commit/fail
		{OrderReserved, OrderFailed},
		{OrderConfirmed, OrderMissing}, // a record's end is no transition
		{OrderState("confirm"), OrderConfirmed},
		{OrderReserved, OrderState("confirm")},
	} {
		if e[0].CanMoveTo(e[1]) {
			t.Errorf("%v.CanMoveTo(%v) = true, want false", e[0], e[1])
		}
	}
}

func TestPartStateTransitions(t *testing.T) {
	all := append([]PartState{PartMissing}, partStates...)
	for _, from := range all {
		for _, to := range all {
			want := slices.Contains(partEdges, [2]PartState{from, to})
			if got := from.CanMoveTo(to); got != want {
				t.Errorf("%v.CanMoveTo(%v) = %v, want %v (state.go's diagram)", from, to, got, want)
			}
		}
	}
	for _, e := range [][2]PartState{
		{PartConfirmed, PartCancelled}, {PartCancelled, PartConfirmed}, {PartCancelled, PartPending},
		{PartPending, PartPending}, {PartPending, PartMissing}, {PartMissing, PartConfirmed},
	} {
		if e[0].CanMoveTo(e[1]) {
			t.Errorf("%v.CanMoveTo(%v) = true, want false", e[0], e[1])
		}
	}
}

func TestParseStates(t *testing.T) {
	for _, s := range orderStates {
		if got, err := ParseOrderState(string(s)); err != nil || got != s || s.String() != string(s) {
			t.Errorf("ParseOrderState(%q) = %v, %v; String %q", string(s), got, err, s.String())
		}
	}
	for _, s := range partStates {
		if got, err := ParsePartState(string(s)); err != nil || got != s || s.String() != string(s) {
			t.Errorf("ParsePartState(%q) = %v, %v; String %q", string(s), got, err, s.String())
		}
	}
	for _, bad := range []string{"", "confirm", "Confirmed", "CONFIRMED", "ORDER_STATUS_CONFIRMED", "pending ", "missing"} {
		if _, err := ParseOrderState(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParseOrderState(%q): %v, want ErrCorrupt quoting it", bad, err)
		}
		if _, err := ParsePartState(bad); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), strconv.Quote(bad)) {
			t.Errorf("ParsePartState(%q): %v, want ErrCorrupt quoting it", bad, err)
		}
	}
	if OrderMissing.String() != "missing" || PartMissing.String() != "missing" {
		t.Errorf("missing states print %q, %q, want the scripts' word \"missing\"", OrderMissing, PartMissing)
	}
	if s := OrderState("confirm").String(); s != `OrderState("confirm")` {
		t.Errorf("an unknown order word prints %s", s)
	}
}

// TestScriptStatusWords reads every script's Lua source and checks that
// each word written to an order record's `status` field or a part
// record's `state` field (HSET …, 'status', <word> / 'state', <word>) is a
// state of state.go, and each written to an order record's `reason` field
// (order_set({…, reason = <word>})) a DecisionReason, and that the scripts
// write every state and reason: a typo in the Lua, or a word no script
// writes any more, fails here.
func TestScriptStatusWords(t *testing.T) {
	if len(scripts) < 20 {
		t.Fatalf("%d scripts registered; newScript and its siblings register every script (lua.go)", len(scripts))
	}
	orderWords, partWords := map[OrderState][]string{}, map[PartState][]string{}
	reasonWords := map[DecisionReason][]string{}
	for _, s := range scripts {
		for _, w := range statusWrites(t, s.name, s.src) {
			switch w.field {
			case "reason":
				r := DecisionReason(w.word)
				if !slices.Contains(decisionReasons, r) {
					t.Errorf("script %s writes order reason %q (%s): not a DecisionReason of state.go", s.name, w.word, w.at)
				}
				reasonWords[r] = append(reasonWords[r], s.name)
			case "status":
				st, err := ParseOrderState(w.word)
				if err != nil {
					t.Errorf("script %s writes order status %q (%s): %v", s.name, w.word, w.at, err)
				}
				orderWords[st] = append(orderWords[st], s.name)
			case "state":
				st, err := ParsePartState(w.word)
				if err != nil {
					t.Errorf("script %s writes part state %q (%s): %v", s.name, w.word, w.at, err)
				}
				partWords[st] = append(partWords[st], s.name)
			}
		}
	}
	// The one-script paths write records their callers encoded
	// (rectemplate.go): the status and state are the templates', read back
	// from templates filled in as the scripts fill them.
	tc := templateCases()[1]
	local, err := localOrderPieces(tc.order, tc.token, "d", tc.user, 1000, []part{tc.reqs[0].part})
	if err != nil {
		t.Fatal(err)
	}
	staging, err := stagingOrderPieces(tc.token, "d", tc.user, 1000, 10, "")
	if err != nil {
		t.Fatal(err)
	}
	for script, v := range map[string]string{localScript.name: fillOrder(local, 5, 1), stageTakeScript.name: fillOrder(staging, 5)} {
		f, err := unpackOrderValue(v)
		if err != nil {
			t.Fatalf("%s's record template: %v", script, err)
		}
		st, err := ParseOrderState(f["status"])
		if err != nil {
			t.Errorf("%s's record template writes order status %q: %v", script, f["status"], err)
		}
		orderWords[st] = append(orderWords[st], script)
	}
	for _, r := range tc.reqs {
		a, b, err := partTemplate(tc.order, tc.token, r)
		if err != nil {
			t.Fatal(err)
		}
		f, err := unpackPartValue(r.ID, fillPart(a, b, 1, 2, 3, 4))
		if err != nil {
			t.Fatal(err)
		}
		st, err := ParsePartState(f["state"])
		if err != nil {
			t.Errorf("the part template writes part state %q: %v", f["state"], err)
		}
		partWords[st] = append(partWords[st], localScript.name, stageTakeScript.name, reserveScript.name)
	}
	for _, st := range orderStates {
		if len(orderWords[st]) == 0 {
			t.Errorf("no script writes order status %v", st)
		}
	}
	for _, st := range partStates {
		if len(partWords[st]) == 0 {
			t.Errorf("no script writes part state %v", st)
		}
	}
	for _, r := range decisionReasons {
		if len(reasonWords[r]) == 0 {
			t.Errorf("no script writes order reason %q", r)
		}
	}
	// Spot checks that the parser sees what it must.
	for _, c := range []struct {
		st     OrderState
		script string
	}{{OrderConfirmed, "order"}, {OrderStaging, "stage-take"}, {OrderReserved, "reserve-local"}} {
		if !slices.Contains(orderWords[c.st], c.script) {
			t.Errorf("order status %v: written by %v, want %s among them", c.st, orderWords[c.st], c.script)
		}
	}
	if !slices.Contains(partWords[PartConfirmed], "settle") || !slices.Contains(partWords[PartCancelled], "probe") {
		t.Errorf("part states written: %v", partWords)
	}
}

// TestScriptsRegistered checks that every Lua literal or lua/ file of the
// package that writes a status or state field is part of a registered script, so
// TestScriptStatusWords sees it (a script built with redis.NewScript
// directly would not be).
func TestScriptsRegistered(t *testing.T) {
	var all strings.Builder
	for _, s := range scripts {
		all.WriteString(s.src)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || !hsetRE.MatchString(lit.Value) {
				return true
			}
			src, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatalf("%s: %v", fset.Position(lit.Pos()), err)
			}
			if len(statusWrites(t, "literal", src)) > 0 {
				checked++
				if !strings.Contains(all.String(), src) {
					t.Errorf("%s: Lua that writes a status or state is in no registered script (build it with newScript or a sibling)", fset.Position(lit.Pos()))
				}
			}
			return true
		})
	}
	// The scripts' own files (lua/): the same rule.
	names, err := fs.Glob(luaFS, "lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		src := luaFile(strings.TrimPrefix(name, "lua/"))
		if len(statusWrites(t, name, src)) > 0 {
			checked++
			flat, _ := flatBody(src) // a grouped body reads its call in place (luaflat.go)
			if !strings.Contains(all.String(), src) && !strings.Contains(all.String(), flat) {
				t.Errorf("%s writes a status or state and is in no registered script (build it with newScript or a sibling)", name)
			}
		}
	}
	if checked < 3 {
		t.Errorf("found %d Lua literals or files writing a status or state, want the package's (at least 3: order, settle, probe)", checked)
	}
}

var (
	hsetRE = regexp.MustCompile(`(?i)redis\.call\(\s*['"]h(m)?set['"]|\bpart_put\(|\border_put\(|\border_set\(|\border_write\(`)
	// part_put, order_put (the table its second argument), order.lua's
	// order_set (its first), order_write (the status its third) and a
	// record table's state field (partWrites)
	partPutRE  = regexp.MustCompile(`\b(part_put|order_put|order_set|order_write)\(`)
	fieldSetRE = regexp.MustCompile(`\.(state) = ([^\n]+)`)
	luaFunc    = regexp.MustCompile(`local function (\w+)\(([^)]*)\)`)
	luaStr     = regexp.MustCompile(`^'([^'\\]*)'$|^"([^"\\]*)"$`)
	luaIdent   = regexp.MustCompile(`^[A-Za-z_]\w*$`)
)

// statusWrite is one word a script writes to a status or state field.
type statusWrite struct {
	field, word, at string
}

// statusWrites finds every HSET of src that writes the field status or
// state and returns the words it may write. A value that is not a string
// literal is followed to its literals: a parameter of the enclosing local
// function to the literal arguments of that function's calls, a local
// variable to the literals its definition yields (those not compared). A
// value it cannot follow fails the test: write a literal.
func statusWrites(t *testing.T, name, src string) []statusWrite {
	t.Helper()
	var out []statusWrite
	for _, loc := range hsetRE.FindAllStringIndex(src, -1) {
		args := luaArgs(src, loc[0]+len("redis.call("))
		at := strings.TrimSpace(strings.SplitN(src[loc[0]:], "\n", 2)[0])
		for i := 2; i+1 < len(args); i += 2 {
			field := luaLiteral(args[i])
			if field != "status" && field != "state" {
				continue
			}
			words, ok := luaValues(src, loc[0], args[i+1])
			if !ok {
				t.Errorf("script %s: %s: the %s written (%s) is neither a literal nor a local or parameter set from literals", name, at, field, args[i+1])
			}
			for _, w := range words {
				out = append(out, statusWrite{field, w, at})
			}
		}
	}
	return append(out, partWrites(t, name, src)...)
}

// partWrites is statusWrites for the record codecs (partrec.go,
// orderrec.go): the state or status a part_put, order_put or order_set
// call's table constructor writes ({state = <word>, …}) or an
// order_write call's third argument, and each
// assignment to a record table's state field (rec.state = <word>) that a
// part_put writes later.
func partWrites(t *testing.T, name, src string) []statusWrite {
	t.Helper()
	var out []statusWrite
	add := func(pos int, field, expr string) {
		at := strings.TrimSpace(strings.SplitN(src[pos:], "\n", 2)[0])
		words, ok := luaValues(src, pos, strings.TrimSpace(expr))
		if !ok {
			t.Errorf("script %s: %s: the %s written (%s) is neither a literal nor a local or parameter set from literals", name, at, field, expr)
		}
		for _, w := range words {
			out = append(out, statusWrite{field, w, at})
		}
	}
	for _, loc := range partPutRE.FindAllStringIndex(src, -1) {
		if strings.HasSuffix(src[:loc[0]], "function ") {
			continue
		}
		args := luaArgs(src, loc[1])
		if strings.HasPrefix(src[loc[0]:], "order_write(") {
			line := src[strings.LastIndexByte(src[:loc[0]], '\n')+1 : loc[0]]
			// (not in a comment, nor order_put's passing a record's own
			// status through)
			if len(args) > 2 && !strings.HasPrefix(strings.TrimSpace(line), "--") && !strings.HasSuffix(args[2], ".status") {
				add(loc[0], "status", args[2])
			}
			continue
		}
		tab := 1
		if strings.HasPrefix(src[loc[0]:], "order_set(") {
			tab = 0
		}
		if len(args) <= tab || !strings.HasPrefix(args[tab], "{") {
			continue
		}
		for _, entry := range luaArgs(args[tab], 1) {
			if field, expr, ok := strings.Cut(entry, "="); ok {
				switch f := strings.TrimSpace(field); f {
				case "state", "status", "reason":
					add(loc[0], f, expr)
				}
			}
		}
	}
	for _, m := range fieldSetRE.FindAllStringSubmatchIndex(src, -1) {
		add(m[0], src[m[2]:m[3]], src[m[4]:m[5]])
	}
	return out
}

// luaArgs returns the top-level comma-separated arguments of the call
// whose argument list starts at src[from:], up to its closing parenthesis.
func luaArgs(src string, from int) []string {
	var args []string
	depth, start := 0, from
	for i := from; i < len(src); i++ {
		switch c := src[i]; c {
		case '\'', '"':
			j := strings.IndexByte(src[i+1:], c)
			if j < 0 {
				return args
			}
			i += j + 1
		case '(', '{', '[':
			depth++
		case ')', '}', ']':
			if depth == 0 {
				return append(args, strings.TrimSpace(src[start:i]))
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(src[start:i]))
				start = i + 1
			}
		}
	}
	return args
}

// luaLiteral returns the string a Lua string literal holds, or "" for
// anything else.
func luaLiteral(expr string) string {
	m := luaStr.FindStringSubmatch(strings.TrimSpace(expr))
	if m == nil {
		return ""
	}
	return m[1] + m[2]
}

// luaValues returns the words expr, at offset pos of src, may hold.
func luaValues(src string, pos int, expr string) ([]string, bool) {
	if luaStr.MatchString(expr) {
		return []string{luaLiteral(expr)}, true
	}
	if !luaIdent.MatchString(expr) {
		return nil, false
	}
	// A parameter of the nearest local function declared before pos.
	var fn string
	idx := -1
	for _, m := range luaFunc.FindAllStringSubmatchIndex(src[:pos], -1) {
		params := strings.Split(src[m[4]:m[5]], ",")
		fn, idx = "", -1
		for i, p := range params {
			if strings.TrimSpace(p) == expr {
				fn, idx = src[m[2]:m[3]], i
			}
		}
	}
	if fn != "" {
		var words []string
		for _, m := range regexp.MustCompile(`\b`+fn+`\(`).FindAllStringIndex(src, -1) {
			if strings.HasSuffix(src[:m[0]], "function ") {
				continue
			}
			args := luaArgs(src, m[1])
			if idx >= len(args) || !luaStr.MatchString(args[idx]) {
				return nil, false
			}
			words = append(words, luaLiteral(args[idx]))
		}
		return words, len(words) > 0
	}
	// A local variable: the literals of its definition that are not
	// compared (`x == 'confirm' and 'confirmed' or 'cancelled'`).
	def := regexp.MustCompile(`local ` + expr + ` = ([^\n]*)`).FindStringSubmatch(src[:pos])
	if def == nil {
		return nil, false
	}
	var words []string
	for _, m := range regexp.MustCompile(`(==|~=)?\s*'([^']*)'`).FindAllStringSubmatch(def[1], -1) {
		if m[1] == "" {
			words = append(words, m[2])
		}
	}
	return words, len(words) > 0
}

// TestSetAsideRefusesBadBackoff: the stuck-part backoff is the caller's
// (package rollback's) policy; SetAside refuses one it cannot keep,
// naming it, before it looks for the node.
func TestSetAsideRefusesBadBackoff(t *testing.T) {
	inv := &Inventory{}
	for _, b := range [][2]time.Duration{{0, time.Minute}, {-time.Second, time.Minute}, {time.Minute, time.Second}, {time.Microsecond, time.Second}} {
		_, err := inv.SetAside(context.Background(), PendingPart{Node: "n1", PartID: "o|t|0"}, "why", b[0], b[1])
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), b[0].String()) || !strings.Contains(err.Error(), "o|t|0") {
			t.Errorf("SetAside with backoff %v/%v: %v, want ErrInvalid naming the part and the backoff", b[0], b[1], err)
		}
	}
}
