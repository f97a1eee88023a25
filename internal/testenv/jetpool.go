package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// MainWithJetpool is the TestMain of a package whose tests run the jetpool
// binary as child processes (e2e's, the bench's worker, dispatch and status
// children): it builds the binary once into a temp dir and sets *bin, runs
// the tests, and when they pass checks that nothing outlives them (goleak,
// with the ignore options given). It returns the exit code; name prefixes
// its own errors.
func MainWithJetpool(m *testing.M, name string, bin *string, ignore ...goleak.Option) int {
	dir, err := os.MkdirTemp("", "jetpool-"+name+"-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*bin = filepath.Join(dir, "jetpool")
	build := exec.Command("go", "build", "-o", *bin, "github.com/jetpool/jetpool/cmd/jetpool")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "%s: go build ./cmd/jetpool: %v\n", name, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// Every server, connection and pool a test starts is stopped by
		// its cleanups; nothing may outlive the tests.
		if err := goleak.Find(ignore...); err != nil {
			fmt.Fprintf(os.Stderr, "%s: goleak: %v\n", name, err)
			return 1
		}
	}
	return code
}
