package node

import (
	"context"
	"strconv"
	"time"
)

// MemoryLimit is a node's memory limit as its CONFIG says now.
type MemoryLimit struct {
	// Maxmemory is the limit in bytes; 0 means none.
	Maxmemory int64
	// Policy is the maxmemory-policy (noeviction, allkeys-lru …).
	Policy string
}

// String formats the limit for errors and logs, e.g. "maxmemory 10mb,
// noeviction" ("maxmemory none" for 0; sizes in whole mb or kb when they
// are, else in bytes).
func (m MemoryLimit) String() string {
	var size string
	switch b := m.Maxmemory; {
	case b == 0:
		size = "none"
	case b%(1<<20) == 0:
		size = strconv.FormatInt(b>>20, 10) + "mb"
	case b%(1<<10) == 0:
		size = strconv.FormatInt(b>>10, 10) + "kb"
	default:
		size = strconv.FormatInt(b, 10) + " bytes"
	}
	out := "maxmemory " + size
	if m.Policy != "" {
		out += ", " + m.Policy
	}
	return out
}

// memoryRead is a MemoryLimit read at a time.
type memoryRead struct {
	at    time.Time
	limit MemoryLimit
	ok    bool
}

// memoryMaxAge is how long MemoryLimit reuses what it read.
const memoryMaxAge = time.Second

// MemoryLimit returns the node's maxmemory and maxmemory-policy as it
// reports them (CONFIG GET), read at most once a second per node and
// otherwise the last value read; ok is false when they could not be read
// (CONFIG refused by ACL or renamed, the node unreachable). It is meant
// for describing an out-of-memory reply, which the node may send many
// times a second: the limit can change at any time (CONFIG SET), so it is
// not taken from [Settings], read only on contact.
func (n *Node) MemoryLimit(ctx context.Context) (MemoryLimit, bool) {
	if m := n.memory.Load(); m != nil && time.Since(m.at) < memoryMaxAge {
		return m.limit, m.ok
	}
	read := &memoryRead{at: time.Now()}
	vals, err := n.Client().ConfigGet(ctx, "maxmemory*").Result()
	if err == nil {
		if v, found := vals["maxmemory"]; found {
			read.limit.Maxmemory, err = strconv.ParseInt(v, 10, 64)
			read.ok = err == nil
		}
		read.limit.Policy = vals["maxmemory-policy"]
	}
	n.memory.Store(read)
	return read.limit, read.ok
}
