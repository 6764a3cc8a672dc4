package inventory

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/shardis/shardis/node"
)

// This file is the one way the inventory runs a Lua script on a node: the
// shared prelude every script starts with, the header arguments it reads,
// the reply envelope, and the mapping of script errors to typed errors
// (nodeErr). Replies are read strictly by reply.go's reader.
//
// The Lua itself is in lua/, one file per script, named as the Go variable
// that declares it (reserveScript: lua/reserve.lua), embedded at build
// time: the stamp check (lua/stamp.lua), the prelude library
// (lua/prelude.lua, the part and order record codecs, lualib.go), the epilogues
// (lua/epilogue_*.lua), and the snippets some scripts begin with
// (lua/lib_*.lua; each script's declaration lists them). A script's
// source is the stamp check + the library's definitions it uses
// (lualib.go) + snippets + body + epilogue, and its doc comment in Go
// states its keys, arguments and reply.
//
// Every script is called with KEYS[1] = the node's stamp hash
// (node.StampKey) and three header arguments:
//
//	ARGV[1] the node's configured name: a script never changes a node that
//	        is not the node the caller means (SHARDIS_IDENTITY otherwise);
//	ARGV[2] the caller's topology epoch token ("E:fingerprint", see
//	        package topology): it must equal the stamp hash's `epoch` field, or
//	        the script refuses with SHARDIS_EPOCH before reading anything
//	        else;
//	ARGV[3] the part key prefix (partKey("")), which the stamp check names
//	        `partPrefix`.
//
// A script's own keys start at KEYS[2] and its own arguments at ARGV[4].
// Every key a script touches is in KEYS, but for a few: a part whose id
// the script itself reads from an index (the pending index, a redo queue)
// is named partPrefix .. id, so the key format still has its one
// definition in keys.go; the node's settled log, which part_put appends
// to (settledlog.go); and the pending index and redo offsets hash the
// reserve scripts name themselves (lua/prelude.lua). The stamp check defines `partPrefix`; the
// prelude library (a script carries what it uses) `now` (the node's clock,
// ms) and `nowS` (the same as a string), `int(v, what, suffix)`
// (a strict integer parse returning n, or nil and an error reply naming
// what .. suffix, joined only then) and `I(n)`
// (an integer as a command argument: the hot scripts pass integers to
// redis.call as strings, which Redis 7.0 would otherwise format with
// printf's "%.17g", a visible share of a node's CPU under load), and the
// helpers the reserve scripts share between the calls of one script call
// (zset_ok, zadd_later, stock_int/stock_set, offsets_ok/next_offset,
// flush; their rule is next to them in the prelude), the part record
// codec part_get/part_put (partrec.go), through which every script reads
// and writes a part record, and the order record codec
// order_head/order_get/order_put (orderrec.go), likewise for an order
// record.
//
// A write script advances the stamp hash's `seq` field once per script
// call that did not fail (a grouped script: in which any of its calls did
// not fail, group.go; the bare write scripts too: durability.go, "Bare
// writes"); every script replies {seq, body reply} (a grouped
// one {seq, the body replies of its calls, flat: group.go}), and [Inventory.run]
// hands the seq of a write script to [node.Node.Acknowledge], so this
// process knows the highest write sequence each node acknowledged (the
// witness that detects a node coming back with older data). The first
// write of a node's incarnation that this process acknowledges waits
// until a peer holds a mark of it; when none does in time, the call fails
// with an error wrapping [node.ErrUnwitnessed] and [ErrUnavailable] whose
// outcome is unknown (the script ran), which the callers treat like a
// timeout. With
// inventory.durability replica or aof a write script is acknowledged only
// once a replica (or the AOFs) has it (durability.go).
//
// Scripts validate everything before their first write, because Redis does
// not undo the writes of a script that fails halfway: an error reply means
// the script changed nothing.

// luaFS holds the Lua of every inventory script, one file per script in
// lua/ (its name the script's), plus the stamp check, the prelude
// library, the epilogues and the
// lib_*.lua snippets that some scripts start with (their declarations
// say which).
//
//go:embed lua/*.lua
var luaFS embed.FS

// luaFile is the text of lua/name. The files are embedded at build time,
// so a missing one is a bug of this package: it panics while the package
// initialises, before any script can run.
func luaFile(name string) string {
	b, err := luaFS.ReadFile("lua/" + name)
	if err != nil {
		panic("inventory: embedded script lua/" + name + ": " + err.Error())
	}
	return string(b)
}

var epilogueRead = luaFile("epilogue_read.lua")

var epilogueWrite = luaFile("epilogue_write.lua")

// luaScript is one inventory script: its body wrapped in the stamp check
// and the prelude it uses (lualib.go).
type luaScript struct {
	name  string
	write bool
	mem   memRule
	group bool   // sent in its grouped form (group.go)
	src   string // the Lua source, prelude and epilogue included
	text  string // what EVAL sends: the memory rule's shebang, then src
	fn    any    // the name of its function (luafunc.go), what FCALL sends, boxed once for evalArgs
	lib   string // its function library, what FUNCTION LOAD sends
	// context, for a grouped script some of whose layouts have a context
	// (group.go, "Contexts"): how many of the last keys and arguments of
	// a call of nk keys and na arguments are its context (0, 0 for a
	// layout without one); nil: no call has one.
	context func(nk, na int) (ck, ca int)
}

// scripts lists every script built by newScript and its siblings, in the
// order the package declared them, for the checks that read their source
// (state_test.go). Nothing reads it at run time.
var scripts []*luaScript

// register adds s to scripts and returns it.
func register(s *luaScript) *luaScript {
	scripts = append(scripts, s)
	return s
}

// newScript wraps body (Lua, see the file comment for what it may use) in
// the prelude. write says whether the script may change the node; a write
// script is memGrow (refused whole on a full node), a read script memRead.
// newReleaseScript declares a memRelease script.
func newScript(name string, write bool, body string) *luaScript {
	return newScriptMem(name, memOf(write), body)
}

// newReleaseScript is newScript for a write script that may run on a node
// over its maxmemory (memRelease, oom.go: it only decides and settles what
// the node already holds).
func newReleaseScript(name, body string) *luaScript {
	return newScriptMem(name, memRelease, body)
}

func newScriptMem(name string, mem memRule, body string) *luaScript {
	epilogue := epilogueRead
	if mem != memRead {
		epilogue = epilogueWrite
	}
	src := mustScript(name, body, epilogue, false)
	return register(newLuaScript(&luaScript{name: name, write: mem != memRead, mem: mem, src: src}))
}

// newGroupedScript is newScript for a script whose concurrent calls on one
// node share one script call (group commit, group.go).
func newGroupedScript(name string, write bool, body string) *luaScript {
	return newGroupedScriptMem(name, memOf(write), body)
}

// newGroupedReleaseScript is newReleaseScript for a grouped script.
func newGroupedReleaseScript(name, body string) *luaScript {
	return newGroupedScriptMem(name, memRelease, body)
}

func newGroupedScriptMem(name string, mem memRule, body string) *luaScript {
	epilogue := bodyEnd + groupEpilogue + groupEpilogueRead
	if mem != memRead {
		epilogue = bodyEnd + groupCarry + groupEpilogue + groupEpilogueWrite
	}
	src := mustScript(name, body, epilogue, true)
	return register(newLuaScript(&luaScript{name: name, write: mem != memRead, mem: mem, group: true, src: src}))
}

// withContext sets s's context rule (luaScript.context) and returns s.
func (s *luaScript) withContext(rule func(nk, na int) (ck, ca int)) *luaScript {
	s.context = rule
	return s
}

// newLuaScript completes s (its source and memory rule set): its text,
// the memory rule's shebang and the source, and its function library
// (luafunc.go). A source the library cannot be made of
// is a bug of this package: it panics naming the script.
func newLuaScript(s *luaScript) *luaScript {
	s.text = s.mem.shebang() + s.src
	fn, lib, err := functionLibrary(s.name, s.mem, s.src)
	if err != nil {
		panic("inventory: script " + s.name + ": its function library: " + err.Error())
	}
	s.fn, s.lib = fn, lib
	return s
}

// bareSources is the source of every script newBareScript built, by
// name, for the checks that read sources (lua_files_test.go). Nothing
// reads it at run time.
var bareSources = map[string]string{}

// newBareScript is a script that runs without the prelude, outside
// [Inventory.run] (the topology scripts and limit-set: their declarations
// say why); src starts with lua/lib_identity.lua's node identity check.
func newBareScript(name, src string) *redis.Script {
	if err := checkLuaNames(src); err != nil {
		panic("inventory: script " + name + ": " + err.Error())
	}
	bareSources[name] = src
	return redis.NewScript(src)
}

// callEnvelope sends s (its command line a: the stamp and header among
// the keys and arguments) and reads the {seq, body} envelope every script
// replies with: another shape is a [*ReplyError] (reply.go: outcome
// unknown, as after a timeout).
func (inv *Inventory) callEnvelope(ctx context.Context, n *node.Node, s *luaScript, a evalArgs) (any, int64, error) {
	raw, err := inv.call(ctx, n, s, a)
	if err != nil {
		return nil, 0, err
	}
	r := newReplyReader(n.Name(), s.name)
	env := r.list(raw, 2)
	seq := r.int(env, 0)
	if r.err != nil {
		return nil, 0, r.err
	}
	return env[1], seq, nil
}

// evalArgs is the command line of one call of a script as go-redis sends
// it: FCALL, the script's function, the key count, the keys, the arguments
// (stamp and header included). Its callers build it once, keys first,
// in one slice: go-redis's Script would copy the keys and arguments into
// a line of its own on every call, which for a group's call (group.go)
// is the size of all its calls' keys and arguments.
type evalArgs []any

// keys appends ks to a as pointers into ks (go-redis writes a *string as
// its string): boxing each string would allocate once per key. ks must
// not change afterwards (run's rule on keys).
func (a evalArgs) keys(ks []string) evalArgs {
	for j := range ks {
		a = append(a, &ks[j])
	}
	return a
}

// cmd is line a as a command: FCALL of s's function, or EVAL of s's
// source when source is set (a node that would not load or run the
// function: luafunc.go's afterRefusal; nothing ran).
func (s *luaScript) cmd(ctx context.Context, a evalArgs, source bool) *redis.Cmd {
	if source {
		a = append(evalArgs{"eval", s.text, a[2]}, a[3:]...)
	}
	c := redis.NewCmd(ctx, a...)
	c.SetFirstKeyPos(3)
	return c
}

// call sends s (its command line a) and returns its raw reply: by its
// function (loaded first when the node lacks it, or the source when the
// node will not load or run it: luafunc.go), followed by the durability
// wait when the inventory asks for one.
func (inv *Inventory) call(ctx context.Context, n *node.Node, s *luaScript, a evalArgs) (any, error) {
	if s.write && inv.durable() {
		return inv.runDurable(ctx, n, s, a) // durability.go
	}
	c := n.Client()
	cmd := s.cmd(ctx, a, false)
	_ = c.Process(ctx, cmd) // the error is the command's
	if functionMissing(cmd.Err()) {
		inv.afterRefusal(ctx, n, s, func(source bool) error {
			cmd = s.cmd(ctx, a, source)
			_ = c.Process(ctx, cmd)
			return cmd.Err()
		})
	}
	return cmd.Result()
}

// ErrScriptFailed is wrapped when a script failed on the node instead of
// answering: a Lua runtime error (the node's reply starts "ERR
// user_script" or "ERR Error running script", or a command the script
// called failed with ERR: luaFailure) or an operation the script
// does not know (SHARDIS_BADOP). It is a defect or data the script did
// not expect, not a state that passes: retrying meets it again. The
// scripts validate before they write, so it normally changed nothing, but
// Redis keeps the writes a failing script made before the failure, so no
// caller takes it for a refusal to act on: the reconciler sets a part
// whose settle fails so aside ([Unsettleable]) and the service answers it
// as an internal error.
var ErrScriptFailed = errors.New("script failed on node")

// isWrongType reports whether err is Redis's WRONGTYPE error reply: a
// command met a key of another type than it works on.
func isWrongType(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(reply.Error(), "WRONGTYPE")
}

// nodeErr maps an error of a script (or command) on n to the inventory's
// typed errors, in one place: nothing else reads an error's text.
// Error replies are classified by their first word (the scripts' own
// SHARDIS_* codes, and WRONGTYPE from a command inside a script); the
// typed errors and their retry contract:
//
//	SHARDIS_CORRUPT, WRONGTYPE  [ErrCorrupt]: nothing changed; comes back
//	                            until the data is repaired.
//	SHARDIS_NOSTOCK             [ErrStockMissing]: nothing changed; comes
//	                            back until the stock hash is restored.
//	SHARDIS_IDENTITY            [ErrUnavailable] and node.ErrIdentity:
//	                            nothing changed; the node is not the one
//	                            configured (retry once it is).
//	SHARDIS_EPOCH               [ErrUnavailable] and [ErrTopology]:
//	                            nothing changed; retried once by run at
//	                            the same token, then the caller's to retry.
//	SHARDIS_INCARNATION         [ErrIncarnation]: nothing acknowledged;
//	                            reread the node.
//	SHARDIS_REWOUND             [ErrRewound]: nothing acknowledged; the
//	                            node went back in time.
//	SHARDIS_LATE                [ErrUnavailable]: nothing changed; the
//	                            call reached the node after its deadline
//	                            (a load: load_deadline.go); a retry is a
//	                            new call.
//	SHARDIS_RANGE               [ErrInvalid]: nothing changed; the input
//	                            is out of range, a retry fails alike.
//	SHARDIS_BADOP, Lua errors   [ErrScriptFailed]: a defect; retrying
//	                            meets it again.
//	OOM                         [ErrOutOfMemory] (oom.go).
//
// Anything else (other error replies, network errors, timeouts) means the
// node could not serve: [ErrUnavailable]. A [*ReplyError] (a reply of the
// wrong shape) is returned as it is. The original error stays wrapped, so
// [outcomeUnknown] still tells an error reply from a network failure.
func nodeErr(n *node.Node, err error) error {
	if errors.Is(err, ErrMalformedReply) || errors.Is(err, ErrCorrupt) {
		return err // a malformed reply, or corrupt data read back: it names the node already
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		code, _, _ := strings.Cut(reply.Error(), " ")
		switch code {
		case "OOM":
			return oomErr(n, err)
		case "SHARDIS_CORRUPT", "WRONGTYPE":
			return fmt.Errorf("%w: node %s: %w", ErrCorrupt, n.Name(), err)
		case "SHARDIS_NOSTOCK":
			return fmt.Errorf("%w: node %s: %w", ErrStockMissing, n.Name(), err)
		case "SHARDIS_IDENTITY":
			return fmt.Errorf("%w: node %s: %w: %w", ErrUnavailable, n.Name(), node.ErrIdentity, err)
		case "SHARDIS_EPOCH":
			return fmt.Errorf("%w: %w: %w", ErrUnavailable, ErrTopology, err)
		case "SHARDIS_INCARNATION":
			return fmt.Errorf("%w: node %s: %w", ErrIncarnation, n.Name(), err)
		case "SHARDIS_REWOUND":
			return fmt.Errorf("%w: node %s: %w", ErrRewound, n.Name(), err)
		case "SHARDIS_RANGE":
			return fmt.Errorf("%w: node %s: %w", ErrInvalid, n.Name(), err)
		case "SHARDIS_BADOP":
			return fmt.Errorf("%w: node %s: %w", ErrScriptFailed, n.Name(), err)
		case "ERR":
			if luaFailure(reply.Error()) {
				return fmt.Errorf("%w: node %s: %w", ErrScriptFailed, n.Name(), err)
			}
		}
	}
	var named *node.Error
	if errors.As(err, &named) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err) // already names the node
	}
	return fmt.Errorf("%w: node %s: %w", ErrUnavailable, n.Name(), err)
}

// luaFailure reports whether an ERR reply is a Lua runtime error of a
// script (Redis 7's "ERR user_script:…" from EVAL, "ERR user_function:…"
// from FCALL, and the older "ERR Error running script …"), or a command
// the script called failing with ERR, which Redis 7 words with the
// script's place at the end ("ERR Lua redis lib command arguments must be
// strings or integers script: …, on @user_script:1.", "… on
// @user_function:2."): a defect or data the script did not expect, met
// again on a retry. A script stopped by SCRIPT KILL or FUNCTION KILL is
// not one: the node could not serve it this time.
func luaFailure(msg string) bool {
	if strings.HasPrefix(msg, "ERR user_script") || strings.HasPrefix(msg, "ERR user_function") ||
		strings.HasPrefix(msg, "ERR Error running script") {
		return true
	}
	if strings.Contains(msg, "killed by user") {
		return false
	}
	return strings.Contains(msg, ", on @user_script:") || strings.Contains(msg, ", on @user_function:")
}
