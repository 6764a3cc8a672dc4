package router_test

import (
	"fmt"

	"github.com/shardis/shardis/router"
)

// Candidates lists every member in preference order: the first is the
// key's home, the rest are the members to fail over to, in order. Keys
// sharing a hash tag ({user1000}) always share the same order.
func ExampleRing_Candidates() {
	r, err := router.NewRing([]router.Member{
		{Name: "redis-a", Weight: 1},
		{Name: "redis-b", Weight: 1},
		{Name: "redis-c", Weight: 2},
	})
	if err != nil {
		panic(err)
	}
	keys := []string{"{user1000}.following", "{user1000}.followers", "session:1", "session:3", "session:4"}
	for _, key := range keys {
		var names []string
		for _, i := range r.Candidates(key) {
			names = append(names, r.Name(i))
		}
		fmt.Printf("%-21s %v\n", key, names)
	}
	// Output:
	// {user1000}.following  [redis-c redis-a redis-b]
	// {user1000}.followers  [redis-c redis-a redis-b]
	// session:1             [redis-a redis-b redis-c]
	// session:3             [redis-c redis-b redis-a]
	// session:4             [redis-b redis-c redis-a]
}
