package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// jetpoolBin is the jetpool binary, built once by TestMain, that the bench
// runs as its child processes (Options.Self).
var jetpoolBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jetpool-bench-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	jetpoolBin = filepath.Join(dir, "jetpool")
	build := exec.Command("go", "build", "-o", jetpoolBin, "github.com/jetpool/jetpool/cmd/jetpool")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: go build ./cmd/jetpool:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: goleak:", err)
			return 1
		}
	}
	return code
}
