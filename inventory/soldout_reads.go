package inventory

import (
	"github.com/shardis/shardis/node"
)

// What refuseShort's reads of one order are made of (planPeek and
// runPeeks, reserve_plan.go, plan and run them): the stock hashes and
// quotas one node's call reads, and how its reply fills them in; the
// rule they serve is soldout.go's, the batches that carry them
// peekbatch.go's.

// peekRead is one stock hash a peekCall reads.
type peekRead struct {
	sku   int  // index into the order's []shortSKU (refuseShort's skus)
	cand  bool // the node is one of the SKU's candidates
	quota bool // the node is the user's quota node of the SKU's route
}

// peekCall is one order's reads on one node (peekOn) and their reply.
type peekCall struct {
	n      *node.Node
	home   bool
	reads  []peekRead
	keys   []string // their stock hashes
	quotas []int    // the SKUs (indexes into that []shortSKU) whose user's quota counter it reads
	qkeys  []string // those counters
	status string
	vals   []stockVals // per read
	held   []int64     // per quotas
	err    error
	req    peekReq // its reads (peekbatch.go)
	queued bool    // req was queued by runPeeks
}

// isOneOf reports whether n is one of nodes.
func isOneOf(n *node.Node, nodes []*node.Node) bool {
	for _, m := range nodes {
		if m == n {
			return true
		}
	}
	return false
}

// callOn returns the call of calls on node n, or nil.
func callOn(calls []*peekCall, n *node.Node) *peekCall {
	for _, c := range calls {
		if c.n == n {
			return c
		}
	}
	return nil
}

// fill sets the call's reply from its answered reads r, or err.
func (c *peekCall) fill(r *peekReq, err error) {
	if c.err = err; err != nil {
		return
	}
	c.status = r.status
	for _, v := range r.vals {
		if v.err != nil {
			c.err = v.err
			return
		}
	}
	c.vals, c.held = r.vals, r.held
}
