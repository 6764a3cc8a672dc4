package cache_test

import (
	"context"
	"testing"

	"github.com/shardis/shardis/cache"
)

// copiesOn counts, per node, the Redis keys of key's copies in cache
// name's namespace.
func copiesOn(t *testing.T, e *env, name, key string) []int {
	t.Helper()
	var out []int
	for _, s := range e.srv {
		ks, err := s.Client(t).Keys(e.ctx, "shardis:cache:"+name+":cache:r:k*:"+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, len(ks))
	}
	return out
}

// MaxReplicas bounds Replicas' answer (it is clamped to the route's
// nodes, and refused when negative); a Set creates no copy beyond
// Replicas' answer; and without Replicas MaxReplicas is 1: a Set writes
// the key's one copy, and nothing on the other nodes.
func TestMaxReplicasBoundsReplicas(t *testing.T) {
	e := newEnv(t, 1)
	if _, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{MaxReplicas: -1}); err == nil {
		t.Fatal("New with MaxReplicas -1 succeeded, want an error")
	}
	three := func(string) int { return 3 }
	two, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{Name: "two", Replicas: three, MaxReplicas: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close()
	load := func(context.Context, string) ([]byte, error) { return []byte("v"), nil }
	if _, err := two.Get(e.ctx, "k", load); err != nil {
		t.Fatal(err)
	}
	if got := copiesOn(t, e, "two", "k"); got[0]+got[1]+got[2] != 2 || max(got[0], got[1], got[2]) != 1 {
		t.Errorf("Replicas 3, MaxReplicas 2: copies per node %v after a fill, want 2 on distinct nodes", got)
	}
	wide, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{Name: "wide", Replicas: three, MaxReplicas: 10})
	if err != nil {
		t.Fatalf("New with MaxReplicas above the route's 3 nodes: %v, want it clamped", err)
	}
	defer wide.Close()
	if err := wide.Set(e.ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := copiesOn(t, e, "wide", "k"); got[0] != 1 || got[1] != 1 || got[2] != 1 {
		t.Errorf("Replicas 3, MaxReplicas 10 on 3 nodes: copies per node %v after a Set, want one on each", got)
	}
	cool, err := cache.New(e.rtrs[0], "cache", "r", cache.Options{Name: "cool", Replicas: func(string) int { return 1 }})
	if err != nil {
		t.Fatal(err)
	}
	defer cool.Close()
	if err := cool.Set(e.ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if got := copiesOn(t, e, "cool", "k"); got[0]+got[1]+got[2] != 1 {
		t.Errorf("Replicas 1, MaxReplicas the default 3: copies per node %v after a Set of a new key, want 1 (none beyond the answer created)", got)
	}
	plain := e.caches(cache.Options{Name: "plain"})[0]
	if err := plain.Set(e.ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	touched := 0
	for _, s := range e.srv {
		touched += len(s.Client(t).Keys(e.ctx, "shardis:cache:plain:*").Val())
	}
	if touched != 2 { // the copy and its version, on one node
		t.Errorf("Set without Replicas left %d keys, want 2 (one copy and its version)", touched)
	}
}
