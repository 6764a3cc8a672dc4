package cache

import (
	"container/list"
	"sync"
	"time"
)

// l1Cache is a bounded LRU of encoded values with a per-entry expiry. All
// state is behind mu.
type l1Cache struct {
	mu    sync.Mutex
	size  int
	order *list.List               // front = most recently used; values are *l1Entry
	items map[string]*list.Element // key → element of order
	// gen counts removals and purges. A reader takes it before it reads a
	// value from Redis and adds the value only if no invalidation came in
	// between: one that arrived while the read was under way would
	// otherwise be undone by the add, and the old value would stay until
	// its L1 TTL.
	gen uint64
	// off is set by stop (Close): nothing is kept or answered any more.
	off bool
}

type l1Entry struct {
	key     string
	enc     []byte
	expires time.Time
}

func newL1(size int) *l1Cache {
	return &l1Cache{size: size, order: list.New(), items: map[string]*list.Element{}}
}

func (l *l1Cache) get(key string) ([]byte, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.items[key]
	if !ok || l.off {
		return nil, false
	}
	e := el.Value.(*l1Entry)
	if time.Now().After(e.expires) {
		l.order.Remove(el)
		delete(l.items, key)
		return nil, false
	}
	l.order.MoveToFront(el)
	return e.enc, true
}

// generation returns the removal count for a later add.
func (l *l1Cache) generation() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// add stores a value read or loaded after generation returned gen, unless
// a removal or purge happened since.
func (l *l1Cache) add(key string, enc []byte, ttl time.Duration, gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen != gen || l.off {
		return
	}
	if el, ok := l.items[key]; ok {
		e := el.Value.(*l1Entry)
		e.enc, e.expires = enc, time.Now().Add(ttl)
		l.order.MoveToFront(el)
		return
	}
	l.items[key] = l.order.PushFront(&l1Entry{key: key, enc: enc, expires: time.Now().Add(ttl)})
	for l.order.Len() > l.size {
		last := l.order.Back()
		l.order.Remove(last)
		delete(l.items, last.Value.(*l1Entry).key)
	}
}

func (l *l1Cache) remove(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	if el, ok := l.items[key]; ok {
		l.order.Remove(el)
		delete(l.items, key)
	}
}

func (l *l1Cache) purge() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.order.Init()
	l.items = map[string]*list.Element{}
}

// stop empties the L1 and keeps it empty.
func (l *l1Cache) stop() {
	l.purge()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.off = true
}
