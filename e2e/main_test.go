// Package e2e proves jetpool's distributed operation end to end: real
// nats-servers (a three-node cluster in process, the `jetpool server`
// command, servers with auth), real `jetpool` child processes killed or
// stopped with signals, and the real `nats` CLI. Nothing mocks the broker;
// every address is loopback.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// jetpoolBin is the jetpool binary built once by TestMain for every test.
var jetpoolBin string

func TestMain(m *testing.M) {
	testenv.ParallelWaits(4)
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jetpool-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	jetpoolBin = filepath.Join(dir, "jetpool")
	// Versioned as a release build is (the Dockerfile's -X main.version):
	// TestVersionFromLdflags.
	build := exec.Command("go", "build", "-ldflags", "-X main.version="+e2eVersion+" -X main.commit="+e2eCommit,
		"-o", jetpoolBin, "github.com/jetpool/jetpool/cmd/jetpool")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: go build ./cmd/jetpool:", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		// Every server, connection and pool a test starts is stopped by
		// its cleanups; nothing may outlive the tests.
		if err := goleak.Find(
			// nats-server's and nats.go's package-level helpers.
			goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).logRejectedTLSConns"),
			goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server/pse.updateUsage"),
			goleak.IgnoreTopFunction("time.Sleep"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goleak:", err)
			return 1
		}
	}
	return code
}

// tool finds a binary the CI installs (nats, nats-server): in PATH or
// $(go env GOPATH)/bin. Missing, the test fails under CI and skips locally.
func tool(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", name)
			if st, err := os.Stat(p); err == nil && !st.IsDir() {
				return p
			}
		}
	}
	msg := name + " not found in PATH or $(go env GOPATH)/bin (.ci/run installs it)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// syncBuffer is an io.Writer safe for a child's output and the test reading it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{} // signalled on every write
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{ch: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case b.ch <- struct{}{}:
	default:
	}
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a running jetpool child process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuffer
	stderr *syncBuffer
	done   chan struct{}
	err    error // valid after done
}

// childEnv is the environment of a jetpool child: the test's own, with
// every JETPOOL_* variable removed, then env.
func childEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JETPOOL_") && !strings.HasPrefix(kv, "NATS_") {
			out = append(out, kv)
		}
	}
	out = append(out, "JETPOOL_LOG_FORMAT=json", "JETPOOL_DATA_DIR="+filepath.Join(os.TempDir(), "jetpool-e2e-unused"))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// start starts `jetpool args...`; the process is killed when the test ends
// if it still runs, and its output is logged when the test fails.
func start(t testing.TB, env map[string]string, args ...string) *proc {
	t.Helper()
	return startBin(t, jetpoolBin, env, args...)
}

// startBin is start for another program (a tool the CI installs).
func startBin(t testing.TB, bin string, env map[string]string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(bin) + " " + strings.Join(args, " "), stdout: newSyncBuffer(), stderr: newSyncBuffer(), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = childEnv(env)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start(), p.name)
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			stderr := p.stderr.String()
			t.Logf("%s (pid %d)\n--- stdout\n%s--- stderr: its warnings and errors\n%s--- stderr: its end\n%s",
				p.name, p.cmd.Process.Pid, p.stdout, lastLines(warnings(stderr), 40), lastLines(stderr, 40))
			// E2E_LOG_DIR keeps every failed test's process logs whole.
			if dir := os.Getenv("E2E_LOG_DIR"); dir != "" {
				name := fmt.Sprintf("%s-%d.log", strings.ReplaceAll(t.Name(), "/", "_"), p.cmd.Process.Pid)
				_ = os.WriteFile(filepath.Join(dir, name), []byte(p.stdout.String()+p.stderr.String()), 0o644)
			}
		}
	})
	return p
}

// warnings is the lines of a JSON log at level warn or error: what went
// wrong earlier than a failed test's last lines show.
func warnings(log string) string {
	var sb strings.Builder
	for _, l := range strings.SplitAfter(log, "\n") {
		if strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`) {
			sb.WriteString(l)
		}
	}
	return sb.String()
}

func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}

// signal sends sig to the child.
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig), "%s: signal %s", p.name, sig)
}

// wait waits for the child to exit and returns its exit code.
func (p *proc) wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitOutput waits until the child's stdout or stderr matches re and
// returns the first submatch (or the whole match).
func (p *proc) waitOutput(t testing.TB, re *regexp.Regexp, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		for _, b := range []*syncBuffer{p.stdout, p.stderr} {
			if m := re.FindStringSubmatch(b.String()); m != nil {
				return m[len(m)-1]
			}
		}
		select {
		case <-p.stdout.ch:
		case <-p.stderr.ch:
		case <-p.done:
			for _, b := range []*syncBuffer{p.stdout, p.stderr} {
				if m := re.FindStringSubmatch(b.String()); m != nil {
					return m[len(m)-1]
				}
			}
			t.Fatalf("%s exited (%v) before printing %q", p.name, p.err, re)
		case <-deadline.C:
			t.Fatalf("%s did not print %q within %s", p.name, re, timeout)
		}
	}
}

// result is a finished command.
type result struct {
	stdout, stderr string
	code           int
	took           time.Duration
}

// jetpool runs `jetpool args...` to completion (at most a minute).
func jetpool(t testing.TB, env map[string]string, args ...string) result {
	t.Helper()
	return runCmd(t, jetpoolBin, childEnv(env), args...)
}

func runCmd(t testing.TB, bin string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	begin := time.Now()
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(begin)}
	if err != nil {
		var xe *exec.ExitError
		require.ErrorAs(t, err, &xe, "%s %v: %s", filepath.Base(bin), args, stderr.String())
		r.code = xe.ExitCode()
	}
	return r
}

// natsCLI runs the real `nats` CLI against server url, with an empty home so
// no saved context of the machine leaks in.
func natsCLI(t testing.TB, url string, args ...string) result {
	t.Helper()
	bin := tool(t, "nats")
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "PATH=" + os.Getenv("PATH"), "TZ=UTC"}
	r := runCmd(t, bin, env, append([]string{"--server", url}, args...)...)
	return r
}
