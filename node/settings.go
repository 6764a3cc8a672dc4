package node

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Settings is what a node's CONFIG says about eviction and persistence,
// read at first contact and again on every reconnect (DOWN→UP). A field is
// "" when the node did not say (CONFIG refused by ACL or renamed).
type Settings struct {
	MaxmemoryPolicy string // noeviction, allkeys-lru, volatile-ttl …
	AppendOnly      string // yes | no
	AppendFsync     string // always | everysec | no
	// AOFLoadTruncated is aof-load-truncated: yes (Redis's default) | no.
	AOFLoadTruncated string
	Version          string // redis_version of INFO server, e.g. 7.0.15
}

// AtLeast reports whether Version is major.minor or newer; false when the
// version is unknown.
func (s Settings) AtLeast(major, minor int) bool {
	parts := strings.SplitN(s.Version, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}

// Evicts reports whether the node may drop keys under memory pressure:
// any maxmemory-policy but noeviction. volatile-* policies count too:
// inventory part and order records carry TTLs. Unknown settings do not.
func (s Settings) Evicts() bool { return s.MaxmemoryPolicy != "" && s.MaxmemoryPolicy != "noeviction" }

// Durable reports whether every write the node acknowledges is on disk
// first: AOF with appendfsync always.
func (s Settings) Durable() bool { return s.AppendOnly == "yes" && s.AppendFsync == "always" }

// LoadsTornScripts reports whether the node runs AOF with
// aof-load-truncated yes, under which a crash that cuts the AOF inside one
// script's writes can leave part of that script applied after a later
// restart: Redis 7.0 loads such a file cut at its last whole command even
// inside the script's MULTI … EXEC, keeps that open MULTI in the file, and
// at the next restart applies its first writes with the next transaction
// (valkey-io/valkey#4342 fixed the loader). With aof-load-truncated no the
// node refuses to start instead, and redis-check-aof --fix cuts the file
// back to before the MULTI. False when the setting is unknown.
func (s Settings) LoadsTornScripts() bool {
	return s.AppendOnly == "yes" && s.AOFLoadTruncated == "yes"
}

// Safe reports whether the node keeps what it acknowledges and every
// script whole across crashes: Durable and not LoadsTornScripts, the
// setting known.
func (s Settings) Safe() bool { return s.Durable() && s.AOFLoadTruncated == "no" }

// Warning describes what is unsafe about the settings for data that must
// not be lost, or "" when nothing is.
func (s Settings) Warning() string {
	var w string
	if s.Evicts() {
		w = "maxmemory-policy " + s.MaxmemoryPolicy + " can evict keys"
	}
	if !s.Durable() {
		if w != "" {
			w += "; "
		}
		switch {
		case s.AppendOnly == "":
			w += "persistence unknown (CONFIG GET refused)"
		case s.AppendOnly != "yes":
			w += "no AOF (appendonly no): acknowledged writes since the last snapshot are lost on a crash"
		default:
			w += "appendfsync " + s.AppendFsync + ": up to a second of acknowledged writes can be lost on a crash"
		}
	}
	if s.LoadsTornScripts() {
		if w != "" {
			w += "; "
		}
		w += "aof-load-truncated yes: after a crash that cuts the AOF inside a script's writes, a later restart can apply half the script " +
			"(set aof-load-truncated no, and repair a cut AOF with redis-check-aof --fix)"
	}
	return w
}

// Settings returns the node's settings as last read, and whether they were
// read at all.
func (n *Node) Settings() (Settings, bool) {
	p := n.settings.Load()
	if p == nil {
		return Settings{}, false
	}
	return *p, true
}

// Evicts reports whether the node's maxmemory-policy can drop keys (see
// [Settings.Evicts]); false until the settings were read.
func (n *Node) Evicts() bool {
	s, _ := n.Settings()
	return s.Evicts()
}

// settingsCmds queues the commands that read the settings on a probe's
// pipeline: CONFIG GET (not allowed in a script) and INFO server.
func settingsCmds(ctx context.Context, pipe redis.Pipeliner) (*redis.Cmd, *redis.StringCmd) {
	return pipe.Do(ctx, "config", "get", "maxmemory-policy", "appendonly", "appendfsync", "aof-load-truncated"), pipe.Info(ctx, "server")
}

// applySettings reads the replies of settingsCmds, records the settings
// and logs what is unsafe about them when Options.Critical is set (or when
// they evict).
func (n *Node) applySettings(cfg *redis.Cmd, info *redis.StringCmd) {
	var s Settings
	vals, err := cfg.Slice()
	if err == nil {
		for i := 0; i+1 < len(vals); i += 2 {
			k, _ := vals[i].(string)
			v, _ := vals[i+1].(string)
			switch k {
			case "maxmemory-policy":
				s.MaxmemoryPolicy = v
			case "appendonly":
				s.AppendOnly = v
			case "appendfsync":
				s.AppendFsync = v
			case "aof-load-truncated":
				s.AOFLoadTruncated = v
			}
		}
	} else {
		n.log.Warn("cannot read the node's eviction and persistence settings (CONFIG GET)", "err", err)
	}
	if text, err := info.Result(); err == nil {
		for _, line := range strings.Split(text, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				s.Version = v
			}
		}
	}
	prev := n.settings.Swap(&s)
	if prev != nil && *prev == s {
		return
	}
	switch w := s.Warning(); {
	case w == "":
	case n.opts.Critical:
		n.log.Warn("node settings are unsafe for inventory data", "warning", w)
	case s.Evicts():
		n.log.Warn("node can evict keys", "maxmemory_policy", s.MaxmemoryPolicy)
	}
}
