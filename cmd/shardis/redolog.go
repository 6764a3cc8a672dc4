package main

// redo-log: reads (and with --follow, keeps reading) one redo queue of a
// node through a running `shardis serve`.

import (
	"context"
	"fmt"
	"io"
	"time"

	v1 "github.com/shardis/shardis/proto/shardis/v1"
)

func cmdRedoLog(ctx context.Context, c *client, args []string) error {
	nodeName := c.fs.String("node", "", "node `name` (required)")
	queueArg := c.fs.String("queue", "", "queue `number`, or a redo log name such as inv:redo:7 (required)")
	after := c.fs.Int64("after", 0, "print entries with an offset greater than this")
	limit := c.fs.Int("limit", 100, "entries per call (1..10000)")
	follow := c.fs.Bool("follow", false, "keep polling every second for new entries until interrupted")
	if _, err := c.parse(args, 0, 0, "node", "queue"); err != nil {
		return err
	}
	queue, err := parseQueue(c, *queueArg)
	if err != nil {
		return err
	}
	if *limit < 1 || *limit > 10000 {
		return c.usageErr("--limit %d: want 1..10000", *limit)
	}
	if *after < 0 {
		return c.usageErr("--after %d: want an offset, 0 or more", *after)
	}
	f := &redoFollower{c: c, follow: *follow, limit: *limit,
		req: &v1.ReadRedoLogRequest{Node: *nodeName, Queue: queue, AfterOffset: *after, Limit: int32(*limit)}}
	for {
		full, err := f.poll(ctx)
		if err != nil || !*follow {
			return err
		}
		if full {
			continue // a full page: more may be waiting
		}
		t := time.NewTimer(followInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil // interrupted
		case <-t.C:
		}
	}
}

// redoFollower reads a redo queue page after page for redo-log, printing
// each page and moving its offset past the entries printed.
type redoFollower struct {
	c       *client
	req     *v1.ReadRedoLogRequest
	follow  bool
	limit   int
	tbl     redoTable
	polled  bool   // a call succeeded: later transient errors are retried
	lastErr string // the last error reported while retrying
	waiting bool   // following: "waiting" was said (once)
	inc     string // following: the node's incarnation at the last read
	saidInc bool   // the incarnation was said on stderr (notes)
	rewound bool   // the last read was past the queue's head (said once: notes)
}

// poll reads and prints one page. full reports a full page (more may be
// waiting). Following, an interruption and a transient error after a
// first success are not errors: the error is reported once and the next
// poll retries.
func (f *redoFollower) poll(ctx context.Context) (full bool, err error) {
	res, err := call(ctx, f.c, f.c.admin.ReadRedoLog, f.req)
	switch {
	case err != nil && f.follow && ctx.Err() != nil:
		return false, nil // interrupted
	case err != nil && f.follow && f.polled && transient(err):
		if err.Error() != f.lastErr {
			fmt.Fprintf(f.c.stderr, "shardis: %v (retrying every %v)\n", err, followInterval)
			f.lastErr = err.Error()
		}
		return false, nil
	case err != nil:
		return false, err
	}
	f.polled, f.lastErr = true, ""
	if f.newIncarnation(res) {
		return true, nil // read again at once, from the start
	}
	f.notes(res) // redolog_notes.go
	if f.follow && len(res.Entries) == 0 && !f.waiting {
		// Following an idle queue prints nothing on stdout: say so once
		// (stderr: stdout stays the entries).
		fmt.Fprintf(f.c.stderr, "%s on %s: no entries after offset %d; waiting for new ones (polling every %v, Ctrl-C to stop)\n",
			res.RedoLog, res.Node, f.req.AfterOffset, followInterval)
		f.waiting = true
	}
	if !f.follow || len(res.Entries) > 0 {
		if err := f.c.out.emit(res, func(w io.Writer) { f.tbl.write(w, res, f.req.AfterOffset) }); err != nil {
			return false, err
		}
	}
	for _, e := range res.Entries {
		if e.Offset > f.req.AfterOffset {
			// the part read there: the next read's rewind check
			f.req.AfterOffset, f.req.AfterPartId = e.Offset, e.PartId
		}
	}
	return len(res.Entries) >= f.limit, nil
}

// newIncarnation reports whether a follower's read res comes from a new
// incarnation of the node (it lost its data and was accepted: its offsets
// started again from 1, so the entries after the follower's offset are
// not the ones it waits for). It says so on stderr and starts the follower
// again from offset 0, res's entries unprinted; the caller reads again. A
// follower that kept its offset printed nothing until the new head passed
// it, then skipped the new incarnation's first entries without a word.
func (f *redoFollower) newIncarnation(res *v1.ReadRedoLogResponse) bool {
	if !f.follow || res.Incarnation == "" {
		return false
	}
	prev := f.inc
	f.inc = res.Incarnation
	if prev == "" || prev == res.Incarnation {
		return false
	}
	fmt.Fprintf(f.c.stderr, "%s on %s: the node is at a new incarnation %s (was %s): it lost its data and its offsets started again; following from offset 0\n",
		res.RedoLog, res.Node, res.Incarnation, prev)
	f.req.AfterOffset, f.req.AfterPartId, f.waiting = 0, "", false
	return true
}
