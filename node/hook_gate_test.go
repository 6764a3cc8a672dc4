package node_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/internal/redistest"
	"github.com/shardis/shardis/node"
)

// Client's contract: "Every command, pipeline and script run on it is
// admitted by the node first: while the node is DOWN or its breaker is open
// it fails at once with an [*Error]". Only go-redis's own connection setup
// (HELLO, AUTH, SELECT, CLIENT SETNAME ...) passes unadmitted, inside a
// command already admitted. A caller's CLIENT ID, or a pipeline of its
// that begins with SELECT, used to pass too: the hook matched the command
// name alone, and a pipeline's first command.
func TestClientCommandsAreAdmittedLikeAny(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	n := newNode(t, node.Options{Name: "n1", Addr: s.Addr()}, nil)
	ctx := context.Background()
	if n.State() != node.StateDown {
		t.Fatal("a new node must be DOWN")
	}
	if err := n.Client().Get(ctx, "k").Err(); !errors.Is(err, node.ErrDown) {
		t.Fatalf("GET on a DOWN node: %v, want ErrDown", err)
	}
	id, err := n.Client().ClientID(ctx).Result()
	if !errors.Is(err, node.ErrDown) {
		t.Fatalf("CLIENT ID on a DOWN node: id %d, err %v; want a refusal wrapping node.ErrDown (it reached the server)", id, err)
	}
	_, err = n.Client().Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Select(ctx, 0)
		p.Set(ctx, "k", "v", 0)
		return nil
	})
	if !errors.Is(err, node.ErrDown) {
		t.Fatalf("a pipeline SELECT, SET on a DOWN node: %v; want a refusal wrapping node.ErrDown", err)
	}
	if v, _ := s.Client(t).Exists(ctx, "k").Result(); v != 0 {
		t.Fatal("the pipeline's SET reached the DOWN node")
	}
}
