package router

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/cespare/xxhash/v2"
)

// PointsPerWeight is the number of virtual points a member gets on a Ring
// per unit of weight.
//
// With k points per member and n equal members, a member's key share
// deviates from 1/n by roughly sqrt((n-1)/(n*k)) (one standard deviation):
// about 3.6 % for 3 members at 512, against 5.1 % at 256 and 6.5 % at 160.
// That is a spread, not a bound: the worst member of a ring lies a few
// deviations out, more often the more members it has (measured over 400
// random name sets, with 1M keys: a member outside ±10 % in 6 rings of 3
// members, 34 of 6 and 101 of 16; redis-1..redis-6 gives redis-1 +15.8 %);
// weights correct a member that a deployment finds too loaded. A 3-member
// ring still has only 1536 points (12 KiB of hashes, and a bucket index
// that leaves about one point to compare per lookup); 16 members give
// 8192 points. Changing this value remaps keys: it is part of the
// placement contract that all clients must share.
const PointsPerWeight = 512

// MaxMembers is the largest number of members a Ring accepts. Member
// indices therefore fit in a uint8 and in the 256-bit set of a Walker.
const MaxMembers = 256

// maxWeight is the largest Weight a Member may have. It bounds the size
// of a Ring (at most MaxMembers*maxWeight*PointsPerWeight points).
const maxWeight = 100

// Member is one node on a ring: a unique, non-empty Name and a relative
// Weight. A member gets Weight*PointsPerWeight points; a Weight below 1
// is treated as 1 and a Weight above 100 is rejected by NewRing. The zero
// Member is invalid because its Name is empty.
type Member struct {
	Name   string // the node's name: unique on the ring, not empty
	Weight int    // relative share of the ring: 1..100, below 1 counts as 1
}

// Ring is an immutable consistent-hash ring over member names. It is
// safe for concurrent use by multiple goroutines without locking.
//
// The placement of keys depends only on the set of (Name, Weight) pairs,
// never on the order in which members were given to NewRing; member
// indices returned by Home, Candidates and Walk are positions in the slice
// that was given to NewRing.
//
// The zero Ring has no members: Len returns 0, Home returns -1, Candidates
// returns an empty slice and Walk yields nothing. Use NewRing.
type Ring struct {
	names  []string // member names, by index in the NewRing input
	hashes []uint64 // point hashes, sorted ascending
	owners []uint8  // owners[i] is the member index owning hashes[i]
	// index[b] is the position of the first point whose hash's top
	// 64-shift bits are b or more (len(hashes) if none): bucket b's
	// points are hashes[index[b]:index[b+1]], so search looks at a bucket
	// of about one point instead of the whole ring. len(index) is
	// 1<<(64-shift) + 1 (bucketIndex).
	index []uint32
	shift uint // h>>shift is hash h's bucket
}

// NewRing builds a Ring from members. It returns an error if members is
// empty, holds more than MaxMembers entries, or holds an empty or
// duplicate name, or a Weight above 100. NewRing copies what it
// needs; members may be modified afterwards.
func NewRing(members []Member) (*Ring, error) {
	if len(members) == 0 {
		return nil, errors.New("router: ring needs at least one member")
	}
	if len(members) > MaxMembers {
		return nil, fmt.Errorf("router: %d members exceed the maximum of %d", len(members), MaxMembers)
	}
	names := make([]string, len(members))
	seen := make(map[string]int, len(members))
	total := 0
	for i, m := range members {
		if m.Name == "" {
			return nil, fmt.Errorf("router: member %d has an empty name", i)
		}
		if j, dup := seen[m.Name]; dup {
			return nil, fmt.Errorf("router: duplicate member name %q (members %d and %d)", m.Name, j, i)
		}
		if m.Weight > maxWeight {
			return nil, fmt.Errorf("router: member %q has weight %d above the maximum of %d", m.Name, m.Weight, maxWeight)
		}
		seen[m.Name] = i
		names[i] = m.Name
		total += memberWeight(m) * PointsPerWeight
	}

	points := make([]ringPoint, 0, total)
	var buf []byte
	for i, m := range members {
		n := memberWeight(m) * PointsPerWeight
		for p := 0; p < n; p++ {
			buf = append(buf[:0], m.Name...)
			buf = append(buf, '#')
			buf = strconv.AppendInt(buf, int64(p), 10)
			points = append(points, ringPoint{hash: xxhash.Sum64(buf), owner: uint8(i)})
		}
	}
	sortRingPoints(points, names)

	r := &Ring{
		names:  names,
		hashes: make([]uint64, len(points)),
		owners: make([]uint8, len(points)),
	}
	for i, p := range points {
		r.hashes[i] = p.hash
		r.owners[i] = p.owner
	}
	r.index, r.shift = bucketIndex(r.hashes)
	return r, nil
}

// bucketIndex is the index of the sorted point hashes (Ring.index): about
// one bucket per point, a power of two of them (at least 2, at most
// 1<<20: a larger ring has a few points a bucket), each the
// position of its first point, and len(hashes) past the last bucket.
// It costs 4 bytes a bucket: 8 KiB for a 3-member ring's 1536 points,
// 32 KiB for 16 members.
func bucketIndex(hashes []uint64) ([]uint32, uint) {
	bits := uint(1)
	for 1<<bits < len(hashes) && bits < 20 {
		bits++
	}
	shift := 64 - bits
	index := make([]uint32, 1<<bits+1)
	p := 0
	for b := range index {
		for p < len(hashes) && hashes[p]>>shift < uint64(b) {
			p++
		}
		index[b] = uint32(p)
	}
	return index, shift
}

// ringPoint is one virtual point: its hash and its owner's member index.
type ringPoint struct {
	hash  uint64
	owner uint8
}

// sortRingPoints sorts points by hash. Ties are broken by owner name, so
// the resulting sequence of (hash, name) does not depend on the order of
// the members that NewRing was given.
func sortRingPoints(points []ringPoint, names []string) {
	slices.SortFunc(points, func(a, b ringPoint) int {
		if c := cmp.Compare(a.hash, b.hash); c != 0 {
			return c
		}
		return cmp.Compare(names[a.owner], names[b.owner])
	})
}

func memberWeight(m Member) int {
	return max(m.Weight, 1)
}

// Len returns the number of members. It never allocates.
func (r *Ring) Len() int { return len(r.names) }

// Name returns the name of member i, the i-th Member given to NewRing.
// It panics if i is not in [0, Len()). It never allocates.
func (r *Ring) Name(i int) string { return r.names[i] }

// search returns the index of the first point with hash >= h, wrapping to
// 0 past the last point. It requires len(r.hashes) > 0. It searches only
// h's bucket (Ring.index): a point past it has a larger hash, and when
// none in it is >= h, the answer is the next bucket's first point.
func (r *Ring) search(h uint64) int {
	b := h >> r.shift
	lo, hi := int(r.index[b]), int(r.index[b+1])
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if r.hashes[mid] < h {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == len(r.hashes) {
		return 0
	}
	return lo
}

// Home returns the index of the home member of key: the owner of the
// first point clockwise from Hash(key). It returns -1 on a Ring without
// members. Home never allocates and is safe for concurrent use.
func (r *Ring) Home(key string) int {
	if len(r.hashes) == 0 {
		return -1
	}
	return int(r.owners[r.search(Hash(key))])
}

// Candidates returns all member indices in preference order for key:
// walking clockwise from the key's point, each member in order of first
// appearance. The result has length Len(), starts with Home(key), and
// equals the order produced by Walk. It allocates a new slice on each
// call; use Walk to iterate without allocating.
func (r *Ring) Candidates(key string) []int {
	out := make([]int, 0, r.Len())
	w := r.Walk(key)
	for i, ok := w.Next(); ok; i, ok = w.Next() {
		out = append(out, i)
	}
	return out
}

// Walk returns a Walker over the members in the order of Candidates(key).
// Walk does not allocate; the Walker is a value meant to live on the
// stack of one goroutine. The Ring itself may be walked concurrently.
func (r *Ring) Walk(key string) Walker {
	if len(r.hashes) == 0 {
		return Walker{}
	}
	return Walker{r: r, pos: r.search(Hash(key)), left: len(r.names)}
}

// Walker iterates the distinct members of a Ring in preference order for
// one key. Obtain one with Ring.Walk. A Walker must not be used by several
// goroutines at once; copying it forks the iteration. The zero Walker
// yields nothing.
type Walker struct {
	r    *Ring
	pos  int       // next point to examine
	left int       // members not yet returned
	seen [4]uint64 // bitset of returned member indices (MaxMembers bits)
}

// Next returns the next distinct member index and true, or -1 and false
// once every member has been returned. Next never allocates; points of
// already returned members are skipped with a bitset test, so a full
// iteration costs at most one pass over the ring's points.
func (w *Walker) Next() (int, bool) {
	if w.left <= 0 {
		return -1, false
	}
	owners := w.r.owners
	pos := w.pos
	for {
		m := owners[pos]
		pos++
		if pos == len(owners) {
			pos = 0
		}
		bit := uint64(1) << (m & 63)
		if w.seen[m>>6]&bit == 0 {
			w.seen[m>>6] |= bit
			w.pos = pos
			w.left--
			return int(m), true
		}
	}
}
