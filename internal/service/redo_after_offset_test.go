package service

import (
	"fmt"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/shardis/shardis/inventory"
	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

// A ReadRedoLog whose after_offset is over 2^53 (inventory.MaxRedoOffset,
// the largest offset a node holds exactly) is invalid_argument naming the
// field as the client sends it: after_offset, afterOffset for JSON
// (README: error messages name the fields as the client sends them);
// 2^53 itself is read. Before, the handler passed it to the inventory,
// whose message named no field ("after 9007199254740993, want 0..").
func TestReadRedoLogAfterOffsetOver2To53NamesTheField(t *testing.T) {
	e := newRedoR3Env(t)
	over := inventory.MaxRedoOffset + 1
	_, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: "n1", AfterOffset: over, Limit: 10}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "after_offset") {
		t.Errorf("ReadRedoLog after %d: %v; want invalid_argument naming after_offset", over, err)
	}
	m := e.redoR3JSON(t, "ReadRedoLog", fmt.Sprintf(`{"node":"n1","queue":0,"afterOffset":"%d"}`, over))
	if msg, _ := m["message"].(string); m["code"] != "invalid_argument" || !strings.Contains(msg, "afterOffset") {
		t.Errorf("ReadRedoLog after %d (JSON): %v; want invalid_argument naming afterOffset", over, m)
	}
	if _, err := e.admin.ReadRedoLog(e.ctx, connect.NewRequest(&v1.ReadRedoLogRequest{Node: "n1", AfterOffset: inventory.MaxRedoOffset, Limit: 10})); err != nil {
		t.Errorf("ReadRedoLog after 2^53: %v; want it read", err)
	}
}
