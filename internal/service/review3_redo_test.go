package service

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/inventory"
	"github.com/shardis/shardis/node"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// redoR3Env is the service over three real nodes (a heartbeat of an
// hour: no probe runs during a test), with SKU "s" of route "all" loaded.
type redoR3Env struct {
	s     *Server
	srvs  []*redistest.Server
	admin shardisv1connect.AdminServiceClient
	ctx   context.Context
}

func newRedoR3Env(t *testing.T) *redoR3Env {
	t.Helper()
	s, srvs, admin := startOverNodes(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if _, err := s.Inv.LoadStock(ctx, "all", "s", 300, 0); err != nil {
		t.Fatal(err)
	}
	return &redoR3Env{s: s, srvs: srvs, admin: admin, ctx: ctx}
}

// client is a plain client of node name (n1, n2, n3).
func (e *redoR3Env) client(t *testing.T, name string) *redis.Client {
	t.Helper()
	i, err := strconv.Atoi(strings.TrimPrefix(name, "n"))
	if err != nil || i < 1 || i > len(e.srvs) {
		t.Fatalf("node %q", name)
	}
	return e.srvs[i-1].Client(t)
}

// reserveOn reserves one-unit orders until k of them took their unit on
// one node, and returns that node, the queue and those k receipts (in
// offset order). Every order is confirmed.
func (e *redoR3Env) reserveOn(t *testing.T, k int) (string, int32, []inventory.Receipt) {
	t.Helper()
	by := map[string][]inventory.Receipt{}
	for i := 0; i < 60; i++ {
		id := fmt.Sprintf("r3-%d", i)
		res, err := e.s.Inv.Reserve(e.ctx, id, []inventory.Item{{Route: "all", SKU: "s", Quantity: 1}}, "", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.s.Inv.Confirm(e.ctx, id); err != nil {
			t.Fatal(err)
		}
		r := res.Receipts[0]
		by[r.Node] = append(by[r.Node], r)
		if len(by[r.Node]) == k {
			q, err := strconv.Atoi(strings.TrimPrefix(r.RedoLog, "inv:redo:"))
			if err != nil {
				t.Fatal(err)
			}
			return r.Node, int32(q), by[r.Node]
		}
	}
	t.Fatalf("no node took %d of 60 orders", k)
	return "", 0, nil
}

// redoR3JSON sends body to the admin procedure proc as Connect JSON and
// returns the decoded answer (an error's code and message included).
func (e *redoR3Env) redoR3JSON(t *testing.T, proc, body string) map[string]any {
	t.Helper()
	_, out := review2Post(e.ctx, t, "http://"+e.s.Addr()+"/shardis.v1.AdminService/"+proc, "application/json", nil, []byte(body))
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatalf("%s answered %q: %v", proc, out, err)
	}
	return m
}

// Break 1: ReadRedoLog's incarnation is the node's, read with the entries,
// not this process's cached one. Another process accepted the node since
// this one last probed it (simulated by writing the stamp's incarnation:
// the heartbeat is an hour, so no probe refreshes the cache): the entries
// read are the new incarnation's, and were labelled with the old one.
func TestReview3ReadRedoLogIncarnationIsTheNodes(t *testing.T) {
	e := newRedoR3Env(t)
	name, q, rs := e.reserveOn(t, 1)
	cl := e.client(t, name)
	cached, err := e.s.Router.Node(name)
	if err != nil {
		t.Fatal(err)
	}
	was := cached.Incarnation()
	if err := cl.HSet(e.ctx, node.StampKey, "incarnation", "review3-other").Err(); err != nil {
		t.Fatal(err)
	}
	res, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: q, Limit: 10}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Msg.Entries) == 0 || res.Msg.Entries[0].Offset != rs[0].Offset {
		t.Fatalf("ReadRedoLog entries = %v, want offset %d first", res.Msg.Entries, rs[0].Offset)
	}
	if res.Msg.Incarnation != "review3-other" {
		t.Errorf("ReadRedoLog incarnation = %q (the router's cache had %q), want the node's own, review3-other", res.Msg.Incarnation, was)
	}
}

// Break 2 (the RPC): an acknowledgement names the incarnation the
// consumer read at; at another one it is refused with
// failed_precondition naming both, and nothing is trimmed.
func TestReview3AckRedoLogAtAnotherIncarnation(t *testing.T) {
	e := newRedoR3Env(t)
	name, q, rs := e.reserveOn(t, 2)
	res, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: q, Limit: 10}))
	if err != nil {
		t.Fatal(err)
	}
	incA := res.Msg.Incarnation
	acc, err := e.admin.AcceptNode(e.ctx, connect.NewRequest(&v1.AcceptNodeRequest{Node: name, Force: true}))
	if err != nil {
		t.Fatal(err)
	}
	incB := acc.Msg.Incarnation
	last := rs[len(rs)-1].Offset
	m := e.redoR3JSON(t, "AckRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"offset":"%d","incarnation":%q}`, name, q, last, incA))
	msg, _ := m["message"].(string)
	if m["code"] != "failed_precondition" || !strings.Contains(msg, incA) || !strings.Contains(msg, incB) {
		t.Fatalf("AckRedoLog at incarnation %s on a node at %s answered %v; want failed_precondition naming both", incA, incB, m)
	}
	if n, err := e.s.Inv.TrimRedoLog(e.ctx, name, 0, 100); err != nil || n != 0 {
		t.Fatalf("TrimRedoLog after the refused ack = %d, %v; want 0", n, err)
	}
	// at the incarnation it is at, it goes through
	m = e.redoR3JSON(t, "AckRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"offset":"%d","incarnation":%q}`, name, q, last, incB))
	if m["ackedOffset"] != strconv.FormatInt(last, 10) {
		t.Fatalf("AckRedoLog at the node's incarnation answered %v; want ackedOffset %d", m, last)
	}
}

// Break 3: a read whose after is below what the queue still holds
// reports the offsets trimmed past it, as ReadRedoBatch does; one past
// the queue's head reports that the queue went back under it; a
// negative after is refused naming the field.
func TestReview3ReadRedoLogReportsTrimmedAndRewound(t *testing.T) {
	e := newRedoR3Env(t)
	name, q, rs := e.reserveOn(t, 3)
	if rs[1].Offset != rs[0].Offset+1 || rs[2].Offset != rs[1].Offset+1 {
		t.Fatalf("offsets %d %d %d on %s, want consecutive", rs[0].Offset, rs[1].Offset, rs[2].Offset, name)
	}
	if _, err := e.admin.AckRedoLog(e.ctx, connect.NewRequest(&v1.AckRedoLogRequest{Node: name, Queue: q, Offset: rs[1].Offset})); err != nil {
		t.Fatal(err)
	}
	if n, err := e.s.Inv.TrimRedoLog(e.ctx, name, 0, 100); err != nil || n < 2 {
		t.Fatalf("TrimRedoLog = %d, %v; want at least 2", n, err)
	}
	m := e.redoR3JSON(t, "ReadRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"afterOffset":"0","limit":10}`, name, q))
	entries, _ := m["entries"].([]any)
	if len(entries) != 1 {
		t.Fatalf("ReadRedoLog after 0 = %v; want the one entry left", m)
	}
	if want := strconv.FormatInt(rs[1].Offset, 10); m["trimmed"] != want || m["head"] != strconv.FormatInt(rs[2].Offset, 10) {
		t.Errorf("ReadRedoLog after 0 = %v; want trimmed %s (offsets 1..%s were trimmed unread) and head %d", m, want, want, rs[2].Offset)
	}
	m = e.redoR3JSON(t, "ReadRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"afterOffset":"%d","limit":10}`, name, q, rs[2].Offset+5))
	if m["rewound"] != true {
		t.Errorf("ReadRedoLog after %d, past the head %d = %v; want rewound", rs[2].Offset+5, rs[2].Offset, m)
	}
	_, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: q, AfterOffset: -1, Limit: 10}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "after_offset") {
		t.Errorf("ReadRedoLog after -1: %v; want invalid_argument naming after_offset", err)
	}
	m = e.redoR3JSON(t, "ReadRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"afterOffset":"-1"}`, name, q))
	if msg, _ := m["message"].(string); m["code"] != "invalid_argument" || !strings.Contains(msg, "afterOffset") {
		t.Errorf("ReadRedoLog after -1 (JSON): %v; want invalid_argument naming afterOffset", m)
	}
}
