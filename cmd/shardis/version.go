package main

import (
	"runtime"
	"runtime/debug"
)

// version is set at link time: `make build` passes
// -ldflags "-X main.version=$(git describe --tags --always --dirty)".
// Empty otherwise: versionString then reads the build information.
var version = ""

// versionString returns the stamped version; without one, the module
// version (go install m@v, or the pseudo-version go build derives from
// the VCS, v0.0.0-20261127094126-efc10c8de5da), else the VCS revision
// ("devel-3f2a9c1d0e4b (time, modified)"), else "devel" and the Go
// version (go run and go test stamp no revision).
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel (" + runtime.Version() + ", no build information)"
	}
	return fromBuildInfo(bi)
}

// fromBuildInfo is versionString's reading of bi.
func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified, at string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		case "vcs.time":
			at = s.Value
		}
	}
	if rev == "" {
		// go run, go test, -buildvcs=false and git worktrees stamp none.
		return "devel (" + bi.GoVersion + ", no VCS revision stamped: make build stamps the version)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := "devel-" + rev
	if at != "" {
		v += " (" + at
		if modified == "true" {
			v += ", modified"
		}
		v += ")"
	} else if modified == "true" {
		v += " (modified)"
	}
	return v
}
