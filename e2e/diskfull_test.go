//go:build chaos

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider/providertest"
)

// The embedded store on a real filesystem that fills (a tmpfs of a few MiB
// under `jetpool run`'s data dir), then is grown under the running process
// (`mount -o remount,size=`), as an operator frees or adds disk. The
// server meets "no space left on device" and shuts its JetStream down; the
// promise: the same run resumes by itself once space is back, or, stopped
// while full, the next run stores the answers the first held and pays for
// no record twice.

// diskFull is a jetpool run on a tmpfs data dir of size bytes, and the
// billing model it calls.
type diskFull struct {
	dir, data, wf, input string
	srv                  *providertest.BillingServer
	env                  map[string]string
	n                    int
}

// tmpfs mounts a tmpfs of size bytes at dir, unmounted when the test ends.
// It needs root (CAP_SYS_ADMIN), or sudo without a password: without, the
// test skips locally and fails under CI.
func tmpfs(t *testing.T, dir string, size int) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o750))
	out, err := asRoot("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := fmt.Sprintf("mount a tmpfs (needs root): %v: %s", err, out)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	if os.Geteuid() != 0 {
		// The store is written by this user's processes.
		out, err := asRoot("chown", fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid()), dir).CombinedOutput()
		require.NoError(t, err, "chown the tmpfs: %s", out)
	}
	t.Cleanup(func() { _ = asRoot("umount", "-l", dir).Run() })
}

// asRoot is name with args as root: directly when the test is root, else
// through sudo without a password (as .ci/run installs its packages).
func asRoot(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command(name, args...)
	}
	return exec.Command("sudo", append([]string{"-n", name}, args...)...)
}

// grow remounts the tmpfs at dir with size bytes: space comes back under
// the running process.
func grow(t *testing.T, dir string, size int) {
	t.Helper()
	out, err := asRoot("mount", "-o", fmt.Sprintf("remount,size=%d", size), dir).CombinedOutput()
	require.NoError(t, err, "remount: %s", out)
}

func newDiskFull(t *testing.T, n, size int) *diskFull {
	d := &diskFull{dir: t.TempDir(), n: n}
	d.data = filepath.Join(d.dir, "data")
	tmpfs(t, d.data, size)
	d.srv = providertest.NewBillingServer(t, providertest.NewBiller(map[string]providertest.Rates{"bill-1": {Input: 1, Output: 1}}))
	d.srv.Script = func(providertest.BillCall) providertest.BillAnswer {
		// Answers large enough that a few hundred fill the store.
		return providertest.BillAnswer{Latency: 20 * time.Millisecond, Text: strings.Repeat("w", 4000)}
	}
	d.wf = testenv.WriteFile(t, "wf.yaml", fmt.Sprintf(`providers:
  bill: {kind: openai, base_url: %s/v1, api_key_env: BILL_KEY}
defaults: {provider: bill, model: bill-1}
actions:
  - {name: a, prompt: "[[{{ .id }}:a]] {{ .text }}"}
`, d.srv.URL))
	d.input = testenv.Records(t, n)
	d.env = map[string]string{"JETPOOL_DATA_DIR": d.data, "JETPOOL_ACK_WAIT": "10s", "BILL_KEY": "k"}
	return d
}

func (d *diskFull) run(t *testing.T) *proc {
	return start(t, d.env, "run", d.wf, "--input", d.input, "--output", filepath.Join(d.dir, "out.jsonl"),
		"--no-progress", "--concurrency", "16", "--job", "full")
}

// waitFull waits until the run says its store is full, then keeps it full
// a while: no call may be made meanwhile beyond what the slots held.
func (d *diskFull) waitFull(t *testing.T, p *proc) {
	t.Helper()
	p.waitOutput(t, regexp.MustCompile(`no space left|store is full|disk is full`), 2*time.Minute)
	calls := d.srv.Calls()
	since := time.Now()
	testenv.Eventually(t, 30*time.Second, func() bool { return time.Since(since) > 3*time.Second }, "full 3 s")
	t.Logf("store full after %d calls; %d more in 3 s of a full store", calls, d.srv.Calls()-calls)
	require.Less(t, calls, d.n, "the store filled before every record was called")
}

// check holds the promise: every record one ok result, each called once.
func (d *diskFull) check(t *testing.T) {
	t.Helper()
	r := jetpool(t, d.env, "results", "full")
	require.Zero(t, r.code, r.stderr)
	seen := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		m := regexp.MustCompile(`"id":"(r\d+)".*"status":"(\w+)"`).FindStringSubmatch(l)
		require.NotNil(t, m, l)
		require.False(t, seen[m[1]], "one result a record: %s", m[1])
		seen[m[1]] = true
		require.Equal(t, "ok", m[2], l)
	}
	require.Len(t, seen, d.n, "0 lost")
	var twice []string
	for id := range seen {
		if d.srv.CallsOf(id+":a") != 1 {
			twice = append(twice, fmt.Sprintf("%s (%d calls)", id, d.srv.CallsOf(id+":a")))
		}
	}
	require.Empty(t, twice, "every record billed once")
	require.Equal(t, d.n, d.srv.Calls(), "billed calls == records")
}

// The run that filled its store goes on by itself once the filesystem is
// grown, and completes.
func TestChaosDiskFullResumes(t *testing.T) {
	t.Parallel()
	d := newDiskFull(t, 1500, 4<<20)
	p := d.run(t)
	d.waitFull(t, p)
	grow(t, d.data, 64<<20)
	require.Equal(t, 0, p.wait(t, 3*time.Minute), "the same run completes")
	d.check(t)
}

// A run interrupted while its store is full: the answers it held are
// stored by the next run, never paid again.
func TestChaosDiskFullInterrupted(t *testing.T) {
	t.Parallel()
	d := newDiskFull(t, 1500, 4<<20)
	p := d.run(t)
	d.waitFull(t, p)
	p.signal(t, syscall.SIGINT)
	code := p.wait(t, time.Minute)
	t.Logf("interrupted while full: exit %d", code)
	grow(t, d.data, 64<<20)
	again := d.run(t)
	require.Equal(t, 0, again.wait(t, 3*time.Minute), "the next run completes")
	d.check(t)
}

// The data dir removed under a running `jetpool run`: the run ends at once,
// naming the dir (exit 1), instead of waiting on a store that is gone; the
// same command then starts a new store there and completes.
func TestChaosDataDirRemoved(t *testing.T) {
	t.Parallel()
	const n = 400
	m := newModel(t, 20*time.Millisecond)
	dir, wfPath := modelWorkflowFile(t, m)
	data := filepath.Join(dir, "data")
	env := map[string]string{"JETPOOL_DATA_DIR": data, "JETPOOL_ACK_WAIT": "10s", "CHAOS_API_KEY": "k"}
	input := testenv.Records(t, n)
	p := start(t, env, "run", wfPath, "--input", input, "--no-progress", "--concurrency", "8")
	testenv.Eventually(t, time.Minute, func() bool { return m.total() >= n/4 }, "a quarter called")
	require.NoError(t, os.RemoveAll(data))
	require.Equal(t, 1, p.wait(t, 30*time.Second), "the run ends when its store is gone")
	require.Contains(t, p.stderr.String(), "the data dir was removed while jetpool used it: "+data)

	again := start(t, env, "run", wfPath, "--input", input, "--no-progress", "--concurrency", "8")
	require.Equal(t, 0, again.wait(t, 2*time.Minute), "the next run starts a new store and completes")
	require.Contains(t, again.stdout.String(), fmt.Sprintf("%d records, %d succeeded, 0 failed", n, n))
}
