package chaos

import "testing"

// Every final stock part a node holds is held against its row: a missing
// row, another state or quantity is a violation; a refused attempt's
// cancelled part has no row; on a node accepted after a rollback only a
// row of an earlier incarnation is excused. Before, the database was
// compared only as per-node confirmed sums, which a confirmed row for a
// cancelled part plus a missing one for a confirmed part of the same SKU
// pass.
func TestCheckSyncedParts(t *testing.T) {
	good := func() map[string]map[string]syncRow {
		return map[string]map[string]syncRow{"n1": {
			"c0-1|t1|0": {incarnation: "i1", state: "confirmed", qty: 2},
			"c0-2|t2|0": {incarnation: "i1", state: "cancelled", qty: 1},
		}}
	}
	for _, tc := range []struct {
		name    string
		mutate  func(st *state, rows map[string]map[string]syncRow)
		lost    bool // n1 was accepted after a rollback
		ok      bool
		excused bool
	}{
		{"as landed", func(*state, map[string]map[string]syncRow) {}, false, true, false},
		{"a confirmed part without a row", func(_ *state, rows map[string]map[string]syncRow) { delete(rows["n1"], "c0-1|t1|0") }, false, false, false},
		{"a cancelled reservation without a row", func(_ *state, rows map[string]map[string]syncRow) { delete(rows["n1"], "c0-2|t2|0") }, false, false, false},
		{"a refused attempt's part without a row", func(st *state, rows map[string]map[string]syncRow) {
			delete(rows["n1"], "c0-2|t2|0")
			liveRecords(st)["c0-2"].Token = "t3" // a later attempt holds the order
		}, false, true, false},
		{"swapped states, same sums", func(_ *state, rows map[string]map[string]syncRow) {
			rows["n1"]["c0-1|t1|0"] = syncRow{incarnation: "i1", state: "cancelled", qty: 2}
			rows["n1"]["c0-2|t2|0"] = syncRow{incarnation: "i1", state: "confirmed", qty: 1}
		}, false, false, false},
		{"another quantity", func(_ *state, rows map[string]map[string]syncRow) {
			rows["n1"]["c0-1|t1|0"] = syncRow{incarnation: "i1", state: "confirmed", qty: 3}
		}, false, false, false},
		{"a row of an earlier incarnation of a lost node", func(_ *state, rows map[string]map[string]syncRow) {
			rows["n1"]["c0-2|t2|0"] = syncRow{incarnation: "i0", state: "confirmed", qty: 1}
		}, true, true, true},
		{"a row of the current incarnation of a lost node", func(_ *state, rows map[string]map[string]syncRow) {
			rows["n1"]["c0-2|t2|0"] = syncRow{incarnation: "i1", state: "confirmed", qty: 1}
		}, true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, _, _ := fixture(t)
			st.nodes["n1"].incarnation = "i1"
			rows := good()
			tc.mutate(st, rows)
			rep := newReport(Options{})
			if tc.lost {
				rep.excuse = newExposure()
				rep.excuse.nodes["n1"] = true
			}
			checkSyncedParts(rep, st, rows)
			if got := rep.ViolationCounts["sync-part"] == 0; got != tc.ok {
				t.Errorf("consistent = %v, want %v: %+v", got, tc.ok, rep.Violations)
			}
			if got := rep.Excused["sync-part"] > 0; got != tc.excused {
				t.Errorf("excused = %v, want %v", got, tc.excused)
			}
		})
	}
}
