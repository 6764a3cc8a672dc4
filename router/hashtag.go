package router

import (
	"strings"

	"github.com/cespare/xxhash/v2"
)

// HashKey returns the part of key that is hashed to choose a member,
// following the Redis Cluster hash-tag rule: if key contains a '{' and a
// later '}', and the text between the FIRST '{' and the first '}' after it
// is non-empty, that text is returned; otherwise the whole key is returned.
//
// Keys that share a hash tag, such as "{user1000}.following" and
// "{user1000}.followers", therefore map to the same member.
//
// HashKey returns a substring of key and never allocates. It is a pure
// function and safe for concurrent use.
func HashKey(key string) string {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return key
	}
	rest := key[open+1:]
	end := strings.IndexByte(rest, '}')
	if end <= 0 { // no closing brace, or an empty tag "{}"
		return key
	}
	return rest[:end]
}

// Hash returns the 64-bit xxhash (XXH64, seed 0) of HashKey(key). It is the
// position of key on every Ring. Hash never allocates and is safe for
// concurrent use.
func Hash(key string) uint64 {
	return xxhash.Sum64String(HashKey(key))
}
