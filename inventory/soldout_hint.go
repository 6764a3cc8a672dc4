package inventory

import (
	"sync"
	"sync/atomic"
	"time"
)

// The sold-out hint (soldout.go, "The hint"): which (route, SKU) this
// instance saw short lately, so that an order wanting one reads first; and
// the limit hint ("Per-user limits" there): which it saw with a per-user
// limit, so that an order of a user with quotas on several nodes wanting
// one reads first.

// soldOutHintTTL is how long a short SKU makes this instance read before
// it writes.
const soldOutHintTTL = 2 * time.Second

// soldOutHintMax bounds a hint's entries; past it the hint starts over.
const soldOutHintMax = 4096

// limitHintTTL is how long a SKU seen with a per-user limit makes this
// instance read an order's quotas before it takes (soldout.go, "Per-user
// limits"). Limits are set rarely: a stale mark costs a round of reads.
const limitHintTTL = time.Minute

// stockRef names one SKU of one route.
type stockRef struct{ route, sku string }

// skuHint is a set of (route, SKU) marked lately: the sold-out hint (seen
// short, soldout.go) and the limit hint (seen with a per-user limit,
// "Per-user limits" there). The zero value is ready.
type skuHint struct {
	n   atomic.Int64  // entries; 0 lets Reserve skip the lock
	ttl time.Duration // set before first use; 0 means soldOutHintTTL
	mu  sync.RWMutex
	m   map[stockRef]time.Time
}

// life is how long a mark lasts.
func (h *skuHint) life() time.Duration {
	if h.ttl > 0 {
		return h.ttl
	}
	return soldOutHintTTL
}

// any reports whether some item's SKU was marked within the hint's time.
func (h *skuHint) any(items []Item) bool {
	if h.n.Load() == 0 {
		return false
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, it := range items {
		if at, ok := h.m[stockRef{it.Route, it.SKU}]; ok && time.Since(at) < h.life() {
			return true
		}
	}
	return false
}

// mark remembers ref now. A mark younger than half the hint's time is kept
// as it is (no write lock for every refusal of a storm, every order of a
// limited SKU).
func (h *skuHint) mark(ref stockRef) {
	h.mu.RLock()
	at, ok := h.m[ref]
	h.mu.RUnlock()
	if ok && time.Since(at) < h.life()/2 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= soldOutHintMax {
		h.m = map[stockRef]time.Time{}
	}
	h.m[ref] = time.Now()
	h.n.Store(int64(len(h.m)))
}

// clear forgets the items' SKUs.
func (h *skuHint) clear(items []Item) {
	if h.n.Load() == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, it := range items {
		delete(h.m, stockRef{it.Route, it.SKU})
	}
	h.n.Store(int64(len(h.m)))
}
