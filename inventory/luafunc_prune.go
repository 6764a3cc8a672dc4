package inventory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/config"
	"github.com/shardis/shardis/router"
)

// The function libraries on the nodes, across releases (luafunc.go).
//
// Each release loads its own libraries (their names carry a hash of their
// text) and never deletes another's: during a rolling upgrade an old
// instance may still be calling its own. A node so keeps every release's
// libraries that ever ran on it. PruneFunctions deletes those of other
// releases once every instance runs this one (README, "Upgrading
// shardis"); an instance of another release that still runs loses
// nothing, its next calls load its libraries again.

// funcHashHex is how many hex digits of its text's SHA-1 a library's name
// ends with (functionLibrary).
const funcHashHex = 16

// FunctionLibraries returns the names of this release's function
// libraries, one per inventory script, sorted: the libraries its
// instances load on the inventory nodes (README, "Inventory").
func FunctionLibraries() []string {
	var out []string
	for _, s := range scripts {
		out = append(out, s.fn.(string))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// isShardisLibrary reports whether name is a library name functionLibrary
// makes: "shardis_", the script's name, "_" and funcHashHex lowercase hex
// digits. A library of the user's own that starts with "shardis_" but
// does not end so is not one.
func isShardisLibrary(name string) bool {
	rest, ok := strings.CutPrefix(name, "shardis_")
	i := strings.LastIndexByte(rest, '_')
	if !ok || i < 1 || len(rest)-i-1 != funcHashHex {
		return false
	}
	for _, c := range rest[i+1:] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// NodeLibraries is what PruneFunctions found on one node.
type NodeLibraries struct {
	Node    string   // the node's configured name
	Current []string // this release's libraries loaded on the node, sorted
	Other   []string // libraries of other releases, sorted: deleted unless the run was a dry one
	Err     error    // why the node could not be read, or a library not deleted; nil when all went well
}

// PruneFunctions lists the shardis function libraries on every node of
// cfg (FUNCTION LIST) and, unless dryRun, deletes those of other releases
// (FUNCTION DELETE). It returns one NodeLibraries per node, by name; a
// node that is down or refuses has its Err set and the others are still
// done. The error is cfg's (a router that cannot be built). Libraries
// that are not shardis's (isShardisLibrary) are never touched.
func PruneFunctions(ctx context.Context, cfg *config.Config, dryRun bool) ([]NodeLibraries, error) {
	r, err := router.New(ctx, cfg, router.Options{KeepData: cfg.KeepData(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	defer r.Close()
	current := FunctionLibraries()
	var out []NodeLibraries
	for _, n := range r.Nodes() {
		nl := NodeLibraries{Node: n.Name()}
		nl.Current, nl.Other, nl.Err = nodeLibraries(ctx, n.Client(), current)
		if nl.Err == nil && !dryRun {
			nl.Err = deleteLibraries(ctx, n.Client(), nl.Other)
		}
		if nl.Err != nil {
			nl.Err = nodeErr(n, nl.Err)
		}
		out = append(out, nl)
	}
	slices.SortFunc(out, func(a, b NodeLibraries) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// nodeLibraries is the shardis libraries on the node c talks to: those in
// current (sorted), and the others.
func nodeLibraries(ctx context.Context, c *redis.Client, current []string) ([]string, []string, error) {
	libs, err := c.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: "shardis_*"}).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("FUNCTION LIST: %w", err)
	}
	var cur, other []string
	for _, l := range libs {
		switch {
		case !isShardisLibrary(l.Name):
		case slices.Contains(current, l.Name):
			cur = append(cur, l.Name)
		default:
			other = append(other, l.Name)
		}
	}
	slices.Sort(cur)
	slices.Sort(other)
	return cur, other, nil
}

// deleteLibraries deletes names on the node c talks to; one already gone
// (another prune) is no error.
func deleteLibraries(ctx context.Context, c *redis.Client, names []string) error {
	for _, name := range names {
		if err := c.FunctionDelete(ctx, name).Err(); err != nil && !redis.HasErrorPrefix(err, "Library not found") {
			return fmt.Errorf("FUNCTION DELETE %s: %w", name, err)
		}
	}
	return nil
}
