package inventory

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/shardis/shardis/node"
)

// wantMalformed checks that err is a *ReplyError of script at position at,
// matching ErrMalformedReply and nothing that reads as a refusal or a
// corrupt value, and that the callers take its outcome as unknown.
func wantMalformed(t *testing.T, what string, err error, script, at string) {
	t.Helper()
	var re *ReplyError
	switch {
	case err == nil:
		t.Errorf("%s: no error, want a malformed-reply error of %s at %s", what, script, at)
		return
	case !errors.As(err, &re) || !errors.Is(err, ErrMalformedReply):
		t.Errorf("%s: %v, want a *ReplyError", what, err)
		return
	}
	if re.Script != script || re.At != at || re.Node != "n1" {
		t.Errorf("%s: ReplyError{Node %q, Script %q, At %q}, want n1, %s, %s", what, re.Node, re.Script, re.At, script, at)
	}
	if !strings.Contains(err.Error(), "node n1") || !strings.Contains(err.Error(), script+" script") || !strings.Contains(err.Error(), at) {
		t.Errorf("%s: message %q does not name the node, the script and the position", what, err)
	}
	if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrUnavailable) || errors.Is(err, ErrInvalid) {
		t.Errorf("%s: %v matches a refusal sentinel", what, err)
	}
	if !outcomeUnknown(err) {
		t.Errorf("%s: outcomeUnknown = false, want true (as after a timeout)", what)
	}
}

// TestReplyDecodersStrict: every decoder refuses a reply of the wrong
// shape, naming the script and the position, where the conversions that
// dropped their ok read a wrong type as its zero value (a part taken
// with quantity 0, a deadline of 1970, an empty token).
func TestReplyDecodersStrict(t *testing.T) {
	entry := func() []any {
		return []any{int64(1), "p", "o", "s", int64(1), "pending", int64(5), int64(0), "inv:stock:r:s"}
	}
	for _, c := range []struct {
		what, script, at string
		decode           func() error
	}{
		{"reserve: qty a string", "reserve", "reply[5]", func() error {
			_, err := decodeReserveReplies("n1", []any{"pending", int64(1), int64(2), int64(0), "pending", "1", int64(2), int64(0)}, 2, 1)
			return err
		}},
		{"reserve: state an integer", "reserve", "reply[0]", func() error {
			_, err := decodeReserveReplies("n1", []any{int64(1), int64(1), int64(2), int64(0)}, 1, 1)
			return err
		}},
		{"reserve: one reply short", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", []any{"pending", int64(1), int64(2), int64(0)}, 2, 1)
			return err
		}},
		{"reserve-local: reserved as a list", "reserve-local", "reply[0]", func() error {
			_, _, _, err := decodeLocal("n1", []any{"reserved", int64(9), int64(3)}, 1, nil)
			return err
		}},
	} {
		wantMalformed(t, c.what, c.decode(), c.script, c.at)
	}
	// "reserved:<deadline>:<offset>…": every way the string can be wrong
	for _, s := range []string{"reserved", "reserved:", "reserved:9", "reserved:9:", "reserved::3", "reserved:9:3:", "reserved:9:3:4",
		"reserved:x:3", "reserved:9:-3", "reserved:9:+3", "reserved:09:3", "reserved:9:3x", "reserve:9:3", "Reserved:9:3", "reserved:9:1234567890123456789"} {
		_, _, _, err := decodeLocal("n1", s, 1, nil)
		wantMalformed(t, "reserve-local: "+s, err, "reserve-local", "reply")
	}
	for _, c := range []struct {
		what, script, at string
		decode           func() error
	}{
		{"reserve-local: limit one number short", "reserve-local", "reply", func() error {
			_, _, _, err := decodeLocal("n1", []any{"limit", int64(1), int64(2)}, 1, nil)
			return err
		}},
		{"reserve-local: limit held a string", "reserve-local", "reply[2]", func() error {
			_, _, _, err := decodeLocal("n1", []any{"limit", int64(1), "2", int64(5)}, 1, nil)
			return err
		}},
		{"reserve-local: limit for a stock part", "reserve-local", "reply[1]", func() error {
			_, err := localOver("n1", []partReq{{part: part{Kind: PartStock}}}, "u", []int64{1, 2, 5})
			return err
		}},
		{"reserve-local: unknown word", "reserve-local", "reply[0]", func() error {
			_, _, _, err := decodeLocal("n1", []any{"taken"}, 0, nil)
			return err
		}},
		{"stage-take: existing token nil", "stage-take", "reply[2]", func() error {
			_, err := decodeStageTake("n1", []any{"existing", "reserved", nil}, 0)
			return err
		}},
		// a status word no script replies is malformed, never read as a
		// verdict (a garbled word was taken for a refusal, and a probe's
		// for a failed part: found by a review)
		{"reserve: a state word no script replies", "reserve", "reply[0]", func() error {
			_, err := decodeReserveReplies("n1", []any{"takn", int64(1), int64(7), int64(0)}, 1, 1)
			return err
		}},
		{"stage-take: existing, a status no record has", "stage-take", "reply[1]", func() error {
			_, err := decodeStageTake("n1", []any{"existing", "reservd", "t"}, 0)
			return err
		}},
		{"probe: a state word no script replies", "probe", "reply[0][0]", func() error {
			n, err := node.New(node.Options{Name: "n1", Addr: "127.0.0.1:1"})
			if err != nil {
				return err
			}
			defer n.Close()
			_, err = probeResult(n, 1, callReply{v: []any{[]any{"pendng", "tok", int64(1), int64(3)}}})
			return err
		}},
		{"reserve: pending, the limit missing", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "pending:3:7", 1, 1)
			return err
		}},
		{"reserve: pending, a value too many", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "pending:3:7:0:1", 1, 1)
			return err
		}},
		{"reserve: a string not pending", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "none:0:0:0", 1, 1)
			return err
		}},
		{"reserve: a string for two parts", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "pending:3:7:0", 2, 1)
			return err
		}},
		{"reserve: an offset of 0", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "0", 1, 1)
			return err
		}},
		{"reserve: an offset with a leading zero", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "07", 1, 1)
			return err
		}},
		{"reserve: an offset and more", "reserve", "reply", func() error {
			_, err := decodeReserveReplies("n1", "7:1", 1, 1)
			return err
		}},
		{"stage-take: staged as a list", "stage-take", "reply[0]", func() error {
			_, err := decodeStageTake("n1", []any{"staged", int64(9), int64(1)}, 1)
			return err
		}},
		{"stage-take: staged, one offset short", "stage-take", "reply", func() error {
			_, err := decodeStageTake("n1", "staged:9", 1)
			return err
		}},
		{"stage-take: staged, an offset too many", "stage-take", "reply", func() error {
			_, err := decodeStageTake("n1", "staged:9:1", 0)
			return err
		}},
		{"stage-take: reserved, not staged", "stage-take", "reply", func() error {
			_, err := decodeStageTake("n1", "reserved:9:1", 1)
			return err
		}},
		{"pending-due: deadline a string", "pending-due", "reply[0][4]", func() error {
			_, err := decodeDue("n1", []any{[]any{"p", "o", "t", "pending", "12", "1:2", "", int64(0)}})
			return err
		}},
		{"order-move-out: pttl a string", "order-move-out", "reply[1]", func() error {
			_, err := decodeMoveOut("n1", []any{"moved", "100", "Rt", int64(0)})
			return err
		}},
		{"order-move-out: the record a list", "order-move-out", "reply[2]", func() error {
			_, err := decodeMoveOut("n1", []any{"moved", int64(100), []any{"status", "reserved"}, int64(0)})
			return err
		}},
		{"order-move-out: the record without its mark", "order-move-out", "reply[2]", func() error {
			_, err := decodeMoveOut("n1", []any{"moved", int64(100), "rtok", int64(0)})
			return err
		}},
		{"order-move-out: frozen not a flag", "order-move-out", "reply[3]", func() error {
			_, err := decodeMoveOut("n1", []any{"moved", int64(100), "Rt", int64(2)})
			return err
		}},
		{"order-move-out: kept with more", "order-move-out", "reply", func() error {
			_, err := decodeMoveOut("n1", []any{"kept", int64(0)})
			return err
		}},
		{"redo-batch: generation a string", "redo-batch", "reply[1]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", "3", []any{}, int64(0), ""}, nil)
			return err
		}},
		{"redo-batch: an entry's qty nil", "redo-batch", "reply[2][0][3][0][4]", func() error {
			e := entry()
			e[4] = nil
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{e}, int64(0), int64(0), []any{}}}, int64(0), ""},
				[]RedoCursor{{Queue: 0}})
			return err
		}},
		{"redo-batch: rewound 2", "redo-batch", "reply[2][0][2]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(2), []any{}, int64(0), int64(0), []any{}}}, int64(0), ""},
				[]RedoCursor{{Queue: 0}})
			return err
		}},
		{"redo-batch: held 2", "redo-batch", "reply[2][0][5]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{}, int64(0), int64(2), []any{}}}, int64(0), ""},
				[]RedoCursor{{Queue: 0}})
			return err
		}},
		{"redo-batch: without its wait", "redo-batch", "reply", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{}}, nil)
			return err
		}},
		{"redo-batch: without its data_of", "redo-batch", "reply", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{}, int64(0)}, nil)
			return err
		}},
		{"redo-batch: without its problem", "redo-batch", "reply[2][0]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{}, int64(0), int64(0)}}, int64(0), ""},
				[]RedoCursor{{Queue: 0}})
			return err
		}},
		{"redo-batch: a problem of 3", "redo-batch", "reply[2][0][6]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{}, int64(0), int64(0),
				[]any{int64(1), "p", "inv:part:p"}}}, int64(0), ""}, []RedoCursor{{Queue: 0}})
			return err
		}},
		{"redo-batch: a problem without why", "redo-batch", "reply[2][0][6][3]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{}, int64(0), int64(0),
				[]any{int64(1), "p", "inv:part:p", ""}}}, int64(0), ""}, []RedoCursor{{Queue: 0}})
			return err
		}},
		{"redo-batch: a problem's offset a string", "redo-batch", "reply[2][0][6][0]", func() error {
			_, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{}, int64(0), int64(0),
				[]any{"1", "p", "inv:part:p", "why"}}}, int64(0), ""}, []RedoCursor{{Queue: 0}})
			return err
		}},
		{"part-states: without its problem", "part-states", "reply[1][0]", func() error {
			_, _, err := decodePartStates("n1", []any{"inc", []any{[]any{"confirmed", int64(5)}}}, 1)
			return err
		}},
		{"part-states: a state beside a problem", "part-states", "reply[1][0][0]", func() error {
			_, _, err := decodePartStates("n1", []any{"inc", []any{[]any{"pending", int64(0), "why"}}}, 1)
			return err
		}},
		{"part-states: settled_at a string", "part-states", "reply[1][0][1]", func() error {
			_, _, err := decodePartStates("n1", []any{"inc", []any{[]any{"confirmed", "5", ""}}}, 1)
			return err
		}},
	} {
		wantMalformed(t, c.what, c.decode(), c.script, c.at)
	}

	// The well-formed replies read as before.
	if m, err := decodeMoveOut("n1", []any{"kept"}); err != nil || !m.kept || m.moved {
		t.Errorf(`decodeMoveOut({"kept"}) = %+v, %v`, m, err)
	}
	if m, err := decodeMoveOut("n1", []any{"none"}); err != nil || m.kept || m.moved {
		t.Errorf(`decodeMoveOut({"none"}) = %+v, %v`, m, err)
	}
	if r, err := decodeReserveReplies("n1", []any{"pending", int64(1), int64(2), int64(0), "none", int64(0), int64(0), int64(5)}, 2, 1); err != nil ||
		r[0] != (reply{takePending, 1, 2, 0}) || r[1] != (reply{takeNone, 0, 0, 5}) {
		t.Errorf("decodeReserveReplies = %v, %v", r, err)
	}
	if st, dl, offs, err := decodeLocal("n1", "reserved:1764412800000:3:0", 2, nil); err != nil || st != localReserved || dl != 1764412800000 || offs[0] != 3 || offs[1] != 0 {
		t.Errorf("decodeLocal = %v %v %v %v", st, dl, offs, err)
	}
	if st, dl, offs, err := decodeLocal("n1", "reserved:0:10", 1, nil); err != nil || st != localReserved || dl != 0 || len(offs) != 1 || offs[0] != 10 {
		t.Errorf("decodeLocal = %v %v %v %v", st, dl, offs, err)
	}
	if r, err := decodeReserveReplies("n1", "pending:3:7:5", 1, 1); err != nil || len(r) != 1 || r[0] != (reply{takePending, 3, 7, 5}) {
		t.Errorf("decodeReserveReplies(pending string) = %v, %v", r, err)
	}
	// the offset alone: the part taken in full (want units), no limit
	if r, err := decodeReserveReplies("n1", "12", 1, 4); err != nil || len(r) != 1 || r[0] != (reply{takePending, 4, 12, 0}) {
		t.Errorf("decodeReserveReplies(an offset) = %v, %v", r, err)
	}
	if st, err := decodeStageTake("n1", "staged:1764412800000:4:0", 2); err != nil || st.status != stageStaged ||
		st.deadline.UnixMilli() != 1764412800000 || fmt.Sprint(st.offsets) != "[4 0]" {
		t.Errorf("decodeStageTake = %+v, %v", st, err)
	}
	if st, err := decodeStageTake("n1", "staged:1764412800000", 0); err != nil || st.status != stageStaged || len(st.offsets) != 0 {
		t.Errorf("decodeStageTake(no part) = %+v, %v", st, err)
	}
	if st, _, _, err := decodeLocal("n1", []any{"short"}, 2, nil); err != nil || st != localShort {
		t.Errorf("decodeLocal(short) = %v %v", st, err)
	}
	if st, _, over, err := decodeLocal("n1", []any{"limit", int64(2), int64(3), int64(5)}, 2, nil); err != nil || st != localLimit || fmt.Sprint(over) != "[2 3 5]" {
		t.Errorf("decodeLocal(limit) = %v %v %v", st, over, err)
	}
	if b, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(1), int64(0), int64(0), []any{entry()}, int64(0), int64(1), []any{}}}, int64(250), "inc0"},
		[]RedoCursor{{Queue: 2}}); err != nil || b.Queues[0].Queue != 2 || b.Queues[0].Entries[0].Route != "r" || b.Generation != 3 ||
		!b.Queues[0].Held || b.Wait != 250*time.Millisecond || b.DataOf != "inc0" {
		t.Errorf("decodeRedoBatch = %+v, %v", b, err)
	}
	if b, err := decodeRedoBatch("n1", []any{"inc", int64(3), []any{[]any{int64(4), int64(0), int64(0), []any{entry()}, int64(0), int64(0),
		[]any{int64(2), "o|t|0", "inv:part:o|t|0", "WRONGTYPE"}}}, int64(0), ""}, []RedoCursor{{Queue: 1}}); err != nil ||
		b.Queues[0].Problem == nil || *b.Queues[0].Problem != (RedoProblem{Offset: 2, PartID: "o|t|0", Key: "inv:part:o|t|0", Why: "WRONGTYPE"}) ||
		len(b.Queues[0].Entries) != 1 {
		t.Errorf("decodeRedoBatch(a problem) = %+v, %v", b, err)
	}
	if _, st, err := decodePartStates("n1", []any{"inc", []any{[]any{"", int64(0), "why"}, []any{"", int64(0), ""}, []any{"confirmed", int64(5), ""}}}, 3); err != nil ||
		st[0] != (PartSnapshot{State: PartUnreadable, Problem: "why"}) || st[1] != (PartSnapshot{}) || st[2].State != PartConfirmed ||
		st[2].SettledAt.UnixMilli() != 5 {
		t.Errorf("decodePartStates = %+v, %v", st, err)
	}
	if ps, err := decodeDue("n1", nil); err != nil || len(ps) != 0 {
		t.Errorf("decodeDue(empty) = %v, %v", ps, err)
	}
}

// TestReplyReaderPositions: the reader names the first mismatch only,
// with its position and both shapes, and reads nothing after it.
func TestReplyReaderPositions(t *testing.T) {
	r := newReplyReader("n1", "probe")
	raw := r.list([]any{[]any{"a", int64(1)}, []any{"b", "2"}}, 2)
	for i := range raw {
		f := r.listAt(raw, i, 2)
		r.enter(i)
		r.str(f, 0)
		r.int(f, 1)
		r.leave()
	}
	wantMalformed(t, "second element's integer", r.err, "probe", "reply[1][1]")
	if msg := r.err.Error(); !strings.Contains(msg, `"2" (string)`) || !strings.Contains(msg, "want an integer") {
		t.Errorf("message %q does not say what was found and what was wanted", msg)
	}
	if got := r.int([]any{int64(7)}, 0); got != 0 {
		t.Errorf("a read after the first mismatch = %d, want 0", got)
	}
	r = newReplyReader("n1", "probe")
	r.list("ok", 2)
	wantMalformed(t, "a status where a list was expected", r.err, "probe", "reply")
	r = newReplyReader("n1", "limit-set")
	r.word(int64(1), "ok")
	wantMalformed(t, "an integer where ok was expected", r.err, "limit-set", "reply")
}

// TestGroupRepliesFlat: a group's flat replies (epilogue_group.lua) read
// back one per call, and a count past the end, a negative count or a
// boxed value of another size is a malformed reply at its position.
func TestGroupRepliesFlat(t *testing.T) {
	env := []any{int64(4), []any{int64(2), "a", nil, []any{int64(9)}, "s", nil, int64(0), errors.New("boxed? no")}}
	r := newReplyReader("n1", "reserve")
	got := r.replies(env, 1, 5)
	want := []any{[]any{"a", nil}, int64(9), "s", nil, []any{}, errors.New("boxed? no")}
	if r.err != nil || fmt.Sprint(got) != fmt.Sprint(want) || len(got) != len(want) {
		t.Fatalf("replies = %#v, %v; want %#v", got, r.err, want)
	}
	if l, ok := got[0].([]any); !ok || cap(l) != 2 {
		t.Errorf("a list reply %#v (cap %d) may grow into the next reply's elements", got[0], cap(l))
	}
	for _, c := range []struct {
		what string
		flat []any
		at   string
	}{
		{"a count past the end", []any{int64(1), "a", int64(3), "b", "c"}, "reply[1][2]"},
		{"a negative count", []any{int64(-1)}, "reply[1][0]"},
		{"a boxed value of two", []any{"x", []any{int64(1), int64(2)}}, "reply[1][1]"},
		{"not a list", nil, ""},
	} {
		r := newReplyReader("n1", "reserve")
		if c.flat == nil {
			r.replies([]any{int64(1), "flat"}, 1, 1)
			wantMalformed(t, c.what, r.err, "reserve", "reply[1]")
			continue
		}
		r.replies([]any{int64(1), c.flat}, 1, 1)
		wantMalformed(t, c.what, r.err, "reserve", c.at)
	}
}

// TestReplyReaderFlagString: a group's carried flags (epilogue_group_carry.lua)
// read as one byte per commit; a string of another length, another byte, or
// a value that is not a string is a malformed reply at its position.
func TestReplyReaderFlagString(t *testing.T) {
	r := newReplyReader("n1", "reserve")
	if got := r.flagString([]any{int64(1), "101"}, 1, 3); r.err != nil || fmt.Sprint(got) != "[true false true]" {
		t.Errorf("flags of %q = %v, %v; want [true false true]", "101", got, r.err)
	}
	if got := r.flagString([]any{int64(1), ""}, 1, 0); r.err != nil || len(got) != 0 {
		t.Errorf("no flags = %v, %v; want none", got, r.err)
	}
	for _, bad := range []any{"10", "1011", "1x1", []any{int64(1), int64(0), int64(1)}, int64(101)} {
		r = newReplyReader("n1", "reserve")
		r.flagString([]any{int64(1), bad}, 1, 3)
		wantMalformed(t, fmt.Sprintf("flags %#v", bad), r.err, "reserve", "reply[1]")
	}
}
