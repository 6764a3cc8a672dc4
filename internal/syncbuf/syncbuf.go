// Package syncbuf holds Buffer, a byte buffer that goroutines may write
// and read at once: what tests give a log handler or a command's output
// and read while the code under test still writes.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer whose Write and String may be called
// concurrently. The zero value is empty and ready.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p; it never fails.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
