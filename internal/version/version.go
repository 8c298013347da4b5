// Package version describes the running binary from its Go build info:
// the module version and the VCS commit it was built from.
package version

import (
	"fmt"
	"runtime/debug"
)

// Info is what the build info says about the binary.
type Info struct {
	Module    string // module version: "v1.2.3", or "(devel)" for a build from a work tree
	Commit    string // VCS revision, 12 hex digits; empty when unknown (go test, -buildvcs=false)
	Modified  bool   // built from a work tree with uncommitted changes
	GoVersion string
}

// Set by the linker (make build: -X .../internal/version.module=v0.1.0
// -X .../internal/version.commit=...) where the build info has none
// (GOFLAGS=-buildvcs=false, builds outside a work tree).
var module, commit string

// Get reads the build info.
func Get() (i Info) {
	i = Info{Module: "(devel)", GoVersion: "unknown"}
	defer func() {
		if i.Commit == "" && commit != "" {
			i.Commit = commit
		}
		if (i.Module == "(devel)" || i.Module == "") && module != "" {
			i.Module = module
		}
	}()
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return i
	}
	i.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		i.Module = bi.Main.Version
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
			if len(i.Commit) > 12 {
				i.Commit = i.Commit[:12]
			}
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Short is the module version and commit: "v1.2.3 0d7785d1a2b3+dirty".
func (i Info) Short() string {
	s := i.Module
	if i.Commit != "" {
		s += " " + i.Commit
		if i.Modified {
			s += "+dirty"
		}
	}
	return s
}

// String is the line --version prints after the program's name.
func (i Info) String() string {
	commit := i.Commit
	if commit == "" {
		commit = "unknown"
	} else if i.Modified {
		commit += " (modified)"
	}
	return fmt.Sprintf("%s, commit %s, %s", i.Module, commit, i.GoVersion)
}
