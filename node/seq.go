package node

// ObserveSeq records that the node acknowledged a write whose write
// sequence (the `seq` field of the node's stamp hash, advanced by every
// inventory write script) is seq. The node keeps the highest value seen by
// this process: a node found later with a lower sequence has gone back in
// time (restored from an older snapshot, or lost writes not yet on disk).
// Safe for concurrent use; lock-free.
func (n *Node) ObserveSeq(seq int64) {
	for {
		cur := n.maxSeq.Load()
		if seq <= cur || n.maxSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// MaxSeq returns the highest write sequence [Node.ObserveSeq] recorded, or
// 0 when none was.
func (n *Node) MaxSeq() int64 { return n.maxSeq.Load() }
