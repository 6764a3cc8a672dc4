package node

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The read path of a Sentinel group with ReadFromReplicas: a client that
// reads from a replica, redialled and replaced as the group changes.

// replicaConnLifetime bounds how long a connection of the replica read
// client is used (ConnMaxLifetime, give or take replicaConnJitter): every
// dial picks a replica anew, so a read client that fell back to the master
// (no replica was healthy) or whose replica was promoted or went away
// while the node stayed UP reads from a healthy replica again within it.
// It costs each pooled read connection one dial (and one SENTINEL
// REPLICAS) that often.
const (
	replicaConnLifetime = 10 * time.Second
	replicaConnJitter   = 2 * time.Second
)

// readFactory returns the builder of the replica read client with the
// options o: a failover client that prefers replicas, its connections
// redialled every replicaConnLifetime, with the node's hooks and readHook.
func (n *Node) readFactory(o redis.Options) func() *redis.Client {
	o.ConnMaxLifetime = replicaConnLifetime
	o.ConnMaxLifetimeJitter = replicaConnJitter
	mk := n.factory(o, true)
	return func() *redis.Client {
		cl := mk()
		for _, h := range n.opts.Hooks {
			cl.AddHook(h)
		}
		cl.AddHook(readHook{n})
		return cl
	}
}

// ReadClient returns the client of the router's read path. For a Sentinel
// node with ReadFromReplicas it is a client that sends every command to a
// replica of the group (one the sentinels list as healthy, chosen at
// dial; the master when none is). Its connections are redialled, and the
// replica chosen again, every 10s or so (replicaConnLifetime, with
// go-redis's jitter of 2s either way), and it
// is replaced on every DOWN→UP of the node ([Node.SetUp]): after a
// failover it leaves the replica just promoted, and once a replica is
// healthy again it reads from one within that time. Otherwise it is
// [Node.Client]. Replica reads may lag the master (replication is
// asynchronous) and may come from a replica that is about to be promoted
// or demoted. The state gate admits them like any command (refused at
// once while the node is DOWN or its breaker is open), but their failures
// say nothing about the master: they are observed, not counted against
// the breaker. Fetch it per use; do not write through it and do not
// Close it.
func (n *Node) ReadClient() *redis.Client {
	if n.opts.Sentinel == nil || !n.opts.Sentinel.ReadFromReplicas {
		return n.Client()
	}
	if c := n.read.get(); c != nil {
		return c
	}
	return n.Client() // closed before first use: the node's closed client
}

// readHook admits the read client's commands through the node's state
// gate without counting their outcome against the breaker.
type readHook struct{ n *Node }

func (h readHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h readHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if handshake(cmd) {
			return next(ctx, cmd)
		}
		if err := h.n.admitRead(); err != nil {
			cmd.SetErr(err)
			return err
		}
		return h.n.observeRead(ctx, func() error { return next(ctx, cmd) })
	}
}

func (h readHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if handshakes(cmds) {
			return next(ctx, cmds)
		}
		if err := h.n.admitRead(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return h.n.observeRead(ctx, func() error { return next(ctx, cmds) })
	}
}
