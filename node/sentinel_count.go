package node

import (
	"context"
	"net"
)

// How a confirm round counts the group's sentinels (ConfirmMaster's
// majority): one per sentinel, not per address. A sentinel seeded by
// host name is learnt again by the IP it announces, two addresses of one
// sentinel, and a count of addresses let a minority confirm
// (TestMinorityOfSentinelsSeededByHostNameDoesNotConfirm). An address
// counts as the SENTINEL MYID its asker last reached (askerConn). One
// whose sentinel never said (down since the node started, older than
// Redis 6.2, or refusing the command) counts as itself, unless it is a
// host name that resolves to the IP of another known address on the
// same port: both reach the one socket there, and it counts as that
// address does. Without that, a sentinel down since the node started
// counted twice, as its seed and as the IP the others name it by, and
// two of three sentinels seeded by host name never confirmed
// (TestSentinelDownSinceStartCountsOnce). Not closed: a host name that
// does not resolve while its sentinel is down (a DNS record that goes
// with its host, as a Kubernetes pod's) still counts as one more
// sentinel, and so does an announced IP this process cannot reach. Each
// seed must reach one sentinel: an address that load-balances across
// several would be counted as whichever one it reached last.

// keyAnswers sets the key of each answer in out (its ID, else its
// address's: sentinelKeys) and returns how many sentinels the known
// addresses reach, counted so.
func (n *Node) keyAnswers(ctx context.Context, known []string, out []masterAnswer) int {
	keys := n.sentinelKeys(ctx, known)
	distinct := map[string]bool{}
	for _, k := range keys {
		distinct[k] = true
	}
	for i, a := range out {
		out[i].key = sentinelKey(a.id, keys[a.sentinel])
	}
	return len(distinct)
}

// sentinelKeys returns the key each address in addrs is counted by: the
// ID its asker last reached, or, for an address whose sentinel never
// said, the key of the known IP address its host name resolves to on the
// same port (when exactly one key is found so; looked up within
// sentinelBound(ProbeTimeout)), or the address itself.
func (n *Node) sentinelKeys(ctx context.Context, addrs []string) map[string]string {
	keys := make(map[string]string, len(addrs))
	byIP := map[string]string{} // ip:port of an IP address in addrs → its key
	var named []string
	for _, a := range addrs {
		keys[a] = sentinelKey(n.askers.id(a).id, a)
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		if ip := net.ParseIP(host); ip != nil {
			byIP[net.JoinHostPort(ip.String(), port)] = keys[a]
		} else if keys[a] == a {
			named = append(named, a)
		}
	}
	if len(named) == 0 {
		return keys
	}
	ctx, cancel := context.WithTimeout(ctx, sentinelBound(n.opts.ProbeTimeout))
	defer cancel()
	for _, a := range named {
		host, port, _ := net.SplitHostPort(a)
		ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
		if err != nil {
			continue
		}
		found := map[string]bool{}
		for _, ip := range ips {
			if k, ok := byIP[net.JoinHostPort(ip.IP.String(), port)]; ok {
				found[k] = true
			}
		}
		if len(found) == 1 {
			for k := range found {
				keys[a] = k
			}
		}
	}
	return keys
}

// sentinelKey identifies a sentinel for counting: its ID, or the address
// asked when it did not say one (an ID never holds a colon, an address
// always does).
func sentinelKey(id, addr string) string {
	if id != "" {
		return id
	}
	return addr
}
