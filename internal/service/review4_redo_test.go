package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
	"github.com/shardis/shardis/proto/shardis/v1/shardisv1connect"
)

// Gap 2 (the RPC): after_part_id, the part the consumer landed at
// after_offset, catches a queue that went back to a point at or beyond
// the consumer's offset and handed that offset out again to another
// part: the reply is rewound, with no entries, as ReadRedoBatch's. The
// part landed reads on; without after_part_id nothing is compared.
// Before, ReadRedoLogRequest had no such field (the JSON one was refused
// as unknown) and the read went on past an entry the consumer never saw.
func TestReview4ReadRedoLogAfterPartID(t *testing.T) {
	e := newRedoR3Env(t)
	name, q, rs := e.reserveOn(t, 2)
	read := func(extra string) map[string]any {
		t.Helper()
		return e.redoR3JSON(t, "ReadRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"afterOffset":"%d","limit":10%s}`, name, q, rs[0].Offset, extra))
	}
	res, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: q, AfterOffset: rs[0].Offset - 1, Limit: 1}))
	if err != nil || len(res.Msg.Entries) != 1 || res.Msg.Entries[0].Offset != rs[0].Offset {
		t.Fatalf("ReadRedoLog = %v, %v; want the entry at %d", res, err, rs[0].Offset)
	}
	landed := res.Msg.Entries[0].PartId
	m := read(fmt.Sprintf(`,"afterPartId":%q`, landed))
	if entries, _ := m["entries"].([]any); m["rewound"] == true || len(entries) != 1 {
		t.Fatalf("ReadRedoLog after the part landed = %v; want the next entry, not rewound", m)
	}

	// the node went back and handed the offset out again, to another part
	cl := e.client(t, name)
	seg := rs[0].RedoLog + ":s" + strconv.FormatInt(rs[0].Offset/32, 10)
	if n, err := cl.ZRem(e.ctx, seg, landed).Result(); err != nil || n != 1 {
		t.Fatalf("ZREM %s %s = %d, %v", seg, landed, n, err)
	}
	if err := cl.ZAdd(e.ctx, seg, redis.Z{Score: float64(rs[0].Offset), Member: "other|part|0"}).Err(); err != nil {
		t.Fatal(err)
	}
	m = read(fmt.Sprintf(`,"afterPartId":%q`, landed))
	if entries, _ := m["entries"].([]any); m["rewound"] != true || len(entries) != 0 {
		t.Fatalf("ReadRedoLog after_part_id %s, the entry at %d now another part's = %v; want rewound, no entries", landed, rs[0].Offset, m)
	}
	typed, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: q, AfterOffset: rs[0].Offset, AfterPartId: landed, Limit: 10}))
	if err != nil || !typed.Msg.Rewound || len(typed.Msg.Entries) != 0 {
		t.Fatalf("ReadRedoLog (typed) after_part_id %s = %v, %v; want rewound", landed, typed, err)
	}
	if m := read(""); m["rewound"] == true {
		t.Fatalf("ReadRedoLog without after_part_id = %v; want read on (nothing to compare)", m)
	}
	// an ack naming the part landed there is refused: the queue went back
	_, err = e.admin.AckRedoLog(e.ctx, connect.NewRequest(&v1.AckRedoLogRequest{Node: name, Queue: q, Offset: rs[0].Offset, PartId: landed}))
	if connect.CodeOf(err) != connect.CodeFailedPrecondition || !strings.Contains(err.Error(), "other|part|0") {
		t.Fatalf("AckRedoLog part_id %s, the entry at %d now another part's: %v; want failed_precondition naming it", landed, rs[0].Offset, err)
	}
}

// Gap 3: AckRedoLog with a negative offset is invalid_argument naming the
// field, as the CLI refuses it and ReadRedoLog refuses a negative
// after_offset. Before, it did nothing and answered OK.
func TestReview4AckRedoLogNegativeOffset(t *testing.T) {
	e := newRedoR3Env(t)
	name, q, _ := e.reserveOn(t, 1)
	_, err := e.admin.AckRedoLog(e.ctx, connect.NewRequest(&v1.AckRedoLogRequest{Node: name, Queue: q, Offset: -1}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "offset") {
		t.Fatalf("AckRedoLog offset -1: %v; want invalid_argument naming offset", err)
	}
	m := e.redoR3JSON(t, "AckRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"offset":"-5"}`, name, q))
	if msg, _ := m["message"].(string); m["code"] != "invalid_argument" || !strings.Contains(msg, "offset") || !strings.Contains(msg, "-5") {
		t.Fatalf("AckRedoLog offset -5 (JSON): %v; want invalid_argument naming offset and the value", m)
	}
	if v, _ := e.client(t, name).HGetAll(e.ctx, "inv:redo:acked").Result(); len(v) != 0 {
		t.Fatalf("acknowledged %v after the refused acks; want nothing", v)
	}
}

// Gap 1 (the RPC): with durability replica and no replica, ReadRedoLog
// does not hand out an entry a failover may undo (a Reserve that no
// replica acknowledged ran on the master): unavailable, saying why, as
// the library's ErrNotDurable. An idle read answers. Before, the entry
// was handed out.
func TestReview4ReadRedoLogNotDurable(t *testing.T) {
	s, srvs := startService(t, func(cfg *config.Config) {
		cfg.Health.Timeout = 2 * time.Second
		cfg.Health.Heartbeat = time.Hour
		cfg.Inventory.Durability = config.DurabilityReplica
		cfg.Inventory.DurabilityTimeout = 100 * time.Millisecond
	})
	admin := shardisv1connect.NewAdminServiceClient(http.DefaultClient, "http://"+s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The first view writes the topology records, which no replica
	// acknowledges either: the view is not ready ("initialising the
	// topology on n1: … not acknowledged by a replica") until a read
	// finds them on the masters. A Reserve while it is not ready ran
	// nowhere, and is refused as unavailable, not ErrNotDurable (a CI run
	// under load, whose LoadStock and Reserve fell in that window).
	for give := time.Now().Add(10 * time.Second); !s.Inv.TopologyStatus(ctx).Ready; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(give) {
			t.Fatalf("topology not ready after 10 s: %v", s.Inv.TopologyStatus(ctx).Reason)
		}
	}
	_, _ = s.Inv.LoadStock(ctx, "all", "s", 30, 0) // not acknowledged either: ran on the masters
	_, err := s.Inv.Reserve(ctx, "r4-nd", []inventory.Item{{Route: "all", SKU: "s", Quantity: 1}}, "", time.Minute)
	if !errors.Is(err, inventory.ErrNotDurable) {
		t.Fatalf("Reserve with no replica: %v; want ErrNotDurable", err)
	}
	name, q := "", int32(-1)
	for i, srv := range srvs {
		fields, err := srv.Client(t).HGetAll(ctx, inventory.RedoOffsetsKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		heads, err := inventory.RedoHeads(srv.Addr(), fields)
		if err != nil {
			t.Fatal(err)
		}
		for key, head := range heads {
			if n, err := strconv.Atoi(strings.TrimPrefix(key, "inv:redo:")); err == nil && head > 0 {
				name, q = "n"+strconv.Itoa(i+1), int32(n)
			}
		}
	}
	if name == "" {
		t.Fatal("no node holds the unacknowledged Reserve's entry")
	}
	_, err = admin.ReadRedoLog(ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: q, Limit: 10}))
	if connect.CodeOf(err) != connect.CodeUnavailable || !strings.Contains(err.Error(), "not acknowledged by a replica") {
		t.Fatalf("ReadRedoLog of an entry no replica has: %v; want unavailable, not acknowledged by a replica", err)
	}
	idle := (q + 1) % int32(s.Inv.RedoQueues())
	if _, err := admin.ReadRedoLog(ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: name, Queue: idle, Limit: 10})); err != nil {
		t.Fatalf("idle ReadRedoLog: %v; want an answer (no fence)", err)
	}
}

// An AckRedoLog refusal quotes the values it names (the incarnation the
// client sent, the part ids): JSON clients got them rewritten as field
// names (README: the values the client sent "are quoted and never
// rewritten"), an incarnation "user_id" came back as userId.
func TestAckRedoLogRefusalQuotesValues(t *testing.T) {
	e := newRedoR3Env(t)
	name, q, rs := e.reserveOn(t, 1)
	m := e.redoR3JSON(t, "AckRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"offset":"%d","incarnation":"user_id"}`, name, q, rs[0].Offset))
	msg, _ := m["message"].(string)
	if m["code"] != "failed_precondition" || !strings.Contains(msg, `"user_id"`) || strings.Contains(msg, "userId") {
		t.Fatalf("AckRedoLog at incarnation user_id (JSON) = %v; want failed_precondition quoting \"user_id\" as sent", m)
	}
	m = e.redoR3JSON(t, "AckRedoLog", fmt.Sprintf(`{"node":%q,"queue":%d,"offset":"%d","partId":"order_id|x|0"}`, name, q, rs[0].Offset))
	msg, _ = m["message"].(string)
	if m["code"] != "failed_precondition" || !strings.Contains(msg, `"order_id|x|0"`) || strings.Contains(msg, "orderId") {
		t.Fatalf("AckRedoLog part_id order_id|x|0 (JSON) = %v; want failed_precondition quoting it as sent", m)
	}
}
