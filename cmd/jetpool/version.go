package main

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/debug"
)

// version and commit are set when jetpool is built for release (the
// Dockerfile does):
//
//	go build -ldflags "-X main.version=v1.2.3 -X main.commit=$(git rev-parse HEAD)" ./cmd/jetpool
//
// Unset, the module's build info is used: the tag of `go install …@v1.2.3`,
// or for a build in a checkout the pseudo-version and revision Go stamps.
var (
	version string
	commit  string
)

// buildInfo is what `jetpool version` reports.
type buildInfo struct {
	Version  string `json:"version"`
	Commit   string `json:"commit"`
	Time     string `json:"commit_time,omitempty"`
	Modified bool   `json:"modified,omitempty"` // built from a checkout with uncommitted changes
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if b.Version == "" {
			b.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if b.Commit == "" {
					b.Commit = s.Value
				}
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if b.Version == "" || b.Version == "(devel)" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

func (b buildInfo) String() string {
	s := fmt.Sprintf("jetpool %s (commit %s", b.Version, b.Commit)
	if b.Time != "" {
		s += ", " + b.Time
	}
	if b.Modified {
		s += ", modified"
	}
	return s + "; " + b.Go + " " + b.Platform + ")"
}

func cmdVersion(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "[--json]", "Print jetpool's version, the commit it was built from and the Go version (also: jetpool --version).")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	b := readBuildInfo()
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(b)
	}
	fmt.Fprintln(e.stdout, b)
	return nil
}
