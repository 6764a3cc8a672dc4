package inventory

import (
	"sync"
	"sync/atomic"
	"time"
)

// The sold-out hint (soldout.go, "The hint"): which (route, SKU) this
// instance saw short lately, so that an order wanting one reads first.

// soldOutHintTTL is how long a short SKU makes this instance read before
// it writes.
const soldOutHintTTL = 2 * time.Second

// soldOutHintMax bounds the hint's entries; past it the hint starts over.
const soldOutHintMax = 4096

// stockRef names one SKU of one route.
type stockRef struct{ route, sku string }

// soldOutHint is the set of (route, SKU) seen short lately. The zero value
// is ready.
type soldOutHint struct {
	n   atomic.Int64  // entries; 0 lets Reserve skip the lock
	ttl time.Duration // set before first use; 0 means soldOutHintTTL
	mu  sync.RWMutex
	m   map[stockRef]time.Time
}

// life is how long a mark lasts.
func (h *soldOutHint) life() time.Duration {
	if h.ttl > 0 {
		return h.ttl
	}
	return soldOutHintTTL
}

// any reports whether some item's SKU was seen short within soldOutHintTTL.
func (h *soldOutHint) any(items []Item) bool {
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

// mark remembers ref as short now. A mark younger than half the hint's
// time is kept as it is (no write lock for every refusal of a storm).
func (h *soldOutHint) mark(ref stockRef) {
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
func (h *soldOutHint) clear(items []Item) {
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
