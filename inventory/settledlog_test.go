package inventory

import (
	"strings"
	"testing"
)

// SettledCursor.Advance: entries after the cursor number from its Seq+1;
// the log's first entry is number Added-Length+1; a cursor with an ID is
// in the log only while the log holds its entry (Held).
func TestSettledCursorAdvance(t *testing.T) {
	entries := func(ids ...string) []SettledEntry {
		out := make([]SettledEntry, len(ids))
		for i, id := range ids {
			out[i] = SettledEntry{ID: id, PartID: "p" + id}
		}
		return out
	}
	for _, c := range []struct {
		name string
		cur  SettledCursor
		read SettledRead
		want SettledCursor
		gap  bool
	}{
		{"empty log, fresh cursor", SettledCursor{}, SettledRead{}, SettledCursor{}, false},
		{"fresh cursor reads all", SettledCursor{}, SettledRead{Added: 2, Length: 2, Entries: entries("1-0", "2-0"), First: "1-0"},
			SettledCursor{ID: "2-0", Seq: 2}, false},
		{"reads on", SettledCursor{ID: "2-0", Seq: 2}, SettledRead{Added: 3, Length: 3, Entries: entries("3-0"), Held: true, First: "1-0"},
			SettledCursor{ID: "3-0", Seq: 3}, false},
		{"nothing new", SettledCursor{ID: "3-0", Seq: 3}, SettledRead{Added: 3, Length: 3, Held: true, First: "1-0"},
			SettledCursor{ID: "3-0", Seq: 3}, false},
		{"trimmed up to the cursor's entry, kept", SettledCursor{ID: "3-0", Seq: 3},
			SettledRead{Added: 5, Length: 3, Entries: entries("4-0", "5-0"), Held: true, First: "3-0"},
			SettledCursor{ID: "5-0", Seq: 5}, false},
		{"a partial read", SettledCursor{ID: "3-0", Seq: 3}, SettledRead{Added: 9, Length: 7, Entries: entries("4-0", "5-0"), Held: true, First: "3-0"},
			SettledCursor{ID: "5-0", Seq: 5}, false},
		{"trimmed just past the cursor's entry: cannot tell, a gap", SettledCursor{ID: "3-0", Seq: 3},
			SettledRead{Added: 5, Length: 2, Entries: entries("4-0", "5-0"), First: "4-0"},
			SettledCursor{ID: "5-0", Seq: 5}, true},
		{"trimmed past the cursor", SettledCursor{ID: "3-0", Seq: 3}, SettledRead{Added: 9, Length: 2, Entries: entries("8-0", "9-0"), First: "8-0"},
			SettledCursor{ID: "9-0", Seq: 9}, true},
		{"trimmed past the cursor, fresh", SettledCursor{}, SettledRead{Added: 9, Length: 1, Entries: entries("9-0"), First: "9-0"},
			SettledCursor{ID: "9-0", Seq: 9}, true},
		{"fresh cursor at the log's first (a consumer's start)", SettledCursor{Seq: 5},
			SettledRead{Added: 7, Length: 2, Entries: entries("6-0", "7-0"), First: "6-0"},
			SettledCursor{ID: "7-0", Seq: 7}, false},
		{"fresh cursor, another log", SettledCursor{Seq: 5}, SettledRead{Added: 2, Length: 2, Entries: entries("1-0", "2-0"), First: "1-0"},
			SettledCursor{ID: "2-0", Seq: 2}, true},
		{"another log given fewer entries (deleted, or older data)", SettledCursor{ID: "30-0", Seq: 30},
			SettledRead{Added: 4, Length: 3, Entries: entries("31-0"), First: "2-0"},
			SettledCursor{Seq: 1}, true},
		{"deleted and written again past the cursor's number (found by a review)", SettledCursor{ID: "3-0", Seq: 3},
			SettledRead{Added: 5, Length: 5, Entries: entries("10-0", "11-0", "12-0", "13-0", "14-0"), First: "10-0"},
			SettledCursor{ID: "14-0", Seq: 5}, true},
		{"deleted and written again, a partial read", SettledCursor{ID: "3-0", Seq: 3},
			SettledRead{Added: 5, Length: 5, Entries: entries("10-0", "11-0"), First: "10-0"},
			SettledCursor{ID: "11-0", Seq: 2}, true},
		{"deleted and written again, emptied", SettledCursor{ID: "3-0", Seq: 3}, SettledRead{Added: 4, Length: 0},
			SettledCursor{Seq: 4}, true},
		{"an entry with the cursor's id, numbered otherwise", SettledCursor{ID: "3-0", Seq: 3},
			SettledRead{Added: 2, Length: 2, Held: true, First: "1-0"},
			SettledCursor{Seq: 0}, true},
	} {
		got, gap := c.cur.Advance(c.read)
		if got != c.want || gap != c.gap {
			t.Errorf("%s: Advance = %+v, %v; want %+v, %v", c.name, got, gap, c.want, c.gap)
		}
	}
}

// Every part a Confirm or a Cancel settles is named once in its node's
// settled log, after its settled record; a reserve, and a Cancel of an
// order no node knows (a tombstone), name none. ReadSettled reads them
// in order, and from a cursor on.
func TestSettledLogNamesSettledParts(t *testing.T) {
	e := newStagedEnv(t)
	for _, id := range []string{"sl-a", "sl-b", "sl-c"} {
		if _, err := e.reserveAtTTL("", id, stagedTTL*100); err != nil {
			t.Fatal(err)
		}
	}
	read := func(node string, cur SettledCursor) SettledRead {
		t.Helper()
		r, err := e.inv.ReadSettled(e.ctx, node, cur, 100)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		if r := read(n, SettledCursor{}); len(r.Entries) != 0 || r.Added != 0 {
			t.Fatalf("node %s's settled log after reserves only: %+v, want none", n, r)
		}
	}
	if _, err := e.inv.Confirm(e.ctx, "sl-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Cancel(e.ctx, "sl-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.inv.Cancel(e.ctx, "sl-none"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		r := read(n, SettledCursor{})
		if r.Incarnation == "" || r.Added != 2 || r.Length != 2 || len(r.Entries) != 2 {
			t.Fatalf("node %s's settled log: %+v, want 2 entries (one part of sl-a, one of sl-b)", n, r)
		}
		ids := []string{r.Entries[0].PartID, r.Entries[1].PartID}
		if !strings.HasPrefix(ids[0], "sl-a|") || !strings.HasPrefix(ids[1], "sl-b|") {
			t.Errorf("node %s's settled log names %v, want sl-a's part, then sl-b's", n, ids)
		}
		_, states, err := e.inv.PartStates(e.ctx, n, ids)
		if err != nil {
			t.Fatal(err)
		}
		if states[0].State != PartConfirmed || states[1].State != PartCancelled {
			t.Errorf("node %s: the parts the log names are %v, %v; want confirmed, cancelled", n, states[0].State, states[1].State)
		}
		first := SettledCursor{ID: r.Entries[0].ID, Seq: 1}
		after := read(n, first)
		if len(after.Entries) != 1 || after.Entries[0] != r.Entries[1] {
			t.Errorf("node %s: read after the first entry: %+v, want the second alone", n, after.Entries)
		}
		if next, gap := first.Advance(after); gap || next != (SettledCursor{ID: r.Entries[1].ID, Seq: 2}) {
			t.Errorf("node %s: reading on from the first entry: cursor %+v, gap %v", n, next, gap)
		}
	}
	// the log is a stream of one field per entry, as SettledLogKey says
	x, err := e.clients["n1"].XRange(e.ctx, SettledLogKey, "-", "+").Result()
	if err != nil || len(x) != 2 || len(x[0].Values) != 1 || x[0].Values["p"] == nil {
		t.Errorf("n1's %s: %v (%v), want entries of one field p", SettledLogKey, x, err)
	}
}
