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
// version (go install m@v), else the VCS revision go build stamps
// ("devel-3f2a9c1d0e4b, modified"), else "devel" and the Go version
// (go run and go test stamp no revision).
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
		return "devel (" + bi.GoVersion + ", no VCS revision stamped: build with make build or go build)"
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
