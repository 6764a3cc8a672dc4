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
	if !ok {
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

func (l *l1Cache) add(key string, enc []byte, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
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
	if el, ok := l.items[key]; ok {
		l.order.Remove(el)
		delete(l.items, key)
	}
}

func (l *l1Cache) purge() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order.Init()
	l.items = map[string]*list.Element{}
}
