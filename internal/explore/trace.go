package explore

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// The schedule's trace: one line per decision of the scheduler (a pick
// and its fate, a crash point passed) and the notes of the explorer's
// phases ("--" lines), which Digest leaves out.

// Digest is a hash of the schedule's decisions (its trace without the
// notes): two runs of a seed that made the same decisions have the same
// digest.
func (s *Scheduler) Digest() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := fnv.New64a()
	for _, l := range s.trace {
		if !strings.HasPrefix(l, "--") {
			h.Write([]byte(l))
			h.Write([]byte{'\n'})
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

// Trace returns the schedule's decisions so far, one line each.
func (s *Scheduler) Trace() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.trace...)
}

// Note appends a line to the trace.
func (s *Scheduler) Note(format string, a ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trace = append(s.trace, fmt.Sprintf(format, a...))
}
