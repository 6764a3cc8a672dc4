package topology

import (
	"errors"
	"testing"
)

// newestOf takes the highest unfenced epoch, brings fenced copies of it
// forward, and refuses to choose between two copies of one epoch.
func TestNewestOf(t *testing.T) {
	rec := func(node string, epoch int64, tok, att string) Record {
		return Record{Node: node, Epoch: epoch, Token: tok, Attempt: att}
	}
	fenced := func(r Record) Record {
		r.Fenced, r.Held, r.Token = true, r.Token, "behind:"+r.Token
		return r
	}
	cases := []struct {
		name      string
		recs      []Record
		wantTok   string
		wantError bool
	}{
		{"highest epoch", []Record{rec("n1", 1, "1:a", ""), rec("n2", 2, "2:b", "x")}, "2:b", false},
		{"a fenced copy of the epoch is brought forward", []Record{rec("n1", 2, "2:b", "x"), fenced(rec("n2", 2, "2:b", "y"))}, "2:b", false},
		{"a fenced later epoch is the newest (a bump stopped after it)", []Record{rec("n1", 1, "1:a", ""), fenced(rec("n2", 2, "2:b", "y"))}, "2:b", false},
		{"a fenced earlier epoch is not", []Record{rec("n1", 2, "2:b", "y"), fenced(rec("n2", 1, "1:a", ""))}, "2:b", false},
		{"two unfenced copies of one epoch", []Record{rec("n1", 2, "2:b", "x"), rec("n2", 2, "2:b", "y")}, "", true},
		{"two unfenced topologies of one epoch", []Record{rec("n1", 2, "2:b", "x"), rec("n2", 2, "2:c", "x")}, "", true},
		{"every node fenced, agreeing", []Record{fenced(rec("n1", 2, "2:b", "x")), fenced(rec("n2", 2, "2:b", "x"))}, "2:b", false},
		{"every node fenced, two copies", []Record{fenced(rec("n1", 2, "2:b", "x")), fenced(rec("n2", 2, "2:b", "y"))}, "", true},
		{"an attempt unknown does not agree", []Record{rec("n1", 2, "2:b", ""), rec("n2", 2, "2:b", "y")}, "", true},
		{"every node fenced, one copy without an attempt", []Record{fenced(rec("n1", 2, "2:b", "")), fenced(rec("n2", 2, "2:b", "y"))}, "", true},
	}
	for _, c := range cases {
		recs := map[string]Record{}
		for _, r := range c.recs {
			recs[r.Node] = r
		}
		got, err := newestOf(recs)
		switch {
		case c.wantError && !errors.Is(err, ErrInvalid):
			t.Errorf("%s: newestOf = %+v, %v; want ErrInvalid", c.name, got, err)
		case !c.wantError && (err != nil || got.Token != c.wantTok || got.Fenced):
			t.Errorf("%s: newestOf = %+v, %v; want token %s", c.name, got, err, c.wantTok)
		}
	}
}
