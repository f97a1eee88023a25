package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// chromium finds Debian's chromium (.ci/run installs it). Missing, the test
// fails under CI and skips locally.
func chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found in PATH (.ci/run installs Debian's chromium package)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// ScreenshotEnv, set to a path, makes TestDashboardInChromium save its
// screenshot there (docs/ui.png is made so); else it goes to a temp dir.
const ScreenshotEnv = "JETPOOL_UI_SCREENSHOT"

// The README's quickstart and dead-letter story, in a real headless
// Chromium on the dashboard: `jetpool run` works the quickstart on the
// embedded server (its "invalid api key" records are dead-lettered);
// `jetpool ui` serves that store, with the key fixed in its environment
// (the worker's); the page shows the job and its dead letters; they are
// replayed from the page, worked by the ui process (as `jetpool retry`
// works them on the embedded server) and the job ends with all 200
// records succeeded, which `jetpool status` confirms.
func TestDashboardInChromium(t *testing.T) {
	browser := chromium(t)
	dir := t.TempDir()
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_LOG_LEVEL": "warn"}
	run := jetpool(t, env, "run", "../examples/quickstart/workflow.yaml", "--input", "../examples/quickstart/records.jsonl",
		"--output", filepath.Join(dir, "results.jsonl"), "--no-progress")
	require.Equal(t, 4, run.code, "completed with failed records: "+run.stderr)
	m := regexp.MustCompile(`job (\S+) completed: 200 records, (\d+) succeeded, (\d+) failed`).FindStringSubmatch(run.stdout)
	require.NotNil(t, m, run.stdout)
	job := m[1]
	failed, _ := strconv.Atoi(m[3])
	require.Positive(t, failed, "the quickstart's auth faults dead-letter a few records")

	uiEnv := map[string]string{"SIM_API_KEY": "sk-sim-fixed"} // "fix the key"
	for k, v := range env {
		uiEnv[k] = v
	}
	ui := start(t, uiEnv, "ui", "--addr", "127.0.0.1:0")
	url := ui.waitOutput(t, regexp.MustCompile(`jetpool ui on (http://\S+)`), 30*time.Second)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	card := func(name string) string { return `#card-` + name + ` .v` }
	// waitText polls until the element's text is want (the page refreshes
	// itself every two seconds).
	waitText := func(sel, want string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			expr := fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '') === %q`, sel, want)
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}

	// The jobs page lists the job, completed.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1400, 1000),
		chromedp.Navigate(url),
		chromedp.WaitVisible(chromedp.CSS(`a[href="#/job/`+job+`"]`)),
	))
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main table tbody tr`)))
	require.NoError(t, err)
	require.Contains(t, text, "completed")

	// The job's page: its counts, and its dead letters.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(url+"#/job/"+job),
		waitText(card("succeeded"), strconv.Itoa(200-failed)),
		waitText(card("failed"), strconv.Itoa(failed)),
		waitText(card("dead-letters"), strconv.Itoa(failed)),
		chromedp.WaitVisible(chromedp.CSS(`main table tbody tr`)),
	))
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	shot := os.Getenv(ScreenshotEnv)
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "ui.png")
	}
	require.NoError(t, os.WriteFile(shot, png, 0o644))
	t.Logf("screenshot: %s", shot)

	// The dead letters, with their error, replayed from the page.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(url+"#/dlq?job="+job),
		waitText(`#matched`, fmt.Sprintf("%d match", failed)),
	))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main table tbody tr').length`))
	require.NoError(t, err)
	require.Equal(t, failed, rows)
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`main table tbody`)))
	require.NoError(t, err)
	require.Contains(t, text, "failed permanently: AuthError: invalid api key")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-replay`)),
		chromedp.Click(chromedp.CSS(`#confirm-replay`)),
		chromedp.WaitVisible(chromedp.CSS(`#replayed`)),
	))
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#replayed`)))
	require.NoError(t, err)
	require.Contains(t, text, fmt.Sprintf("Replayed %d of %d", failed, failed))
	require.Contains(t, text, "this process works them")

	// Worked with the fixed key: every record succeeded, no dead letter left.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(url+"#/job/"+job),
		waitText(card("succeeded"), "200"),
		waitText(card("failed"), "0"),
		waitText(card("dead-letters"), "0"),
	))
	require.NoError(t, chromedp.Cancel(bctx)) // close the browser

	// The CLI beside the dashboard agrees: `jetpool status` reaches the
	// store through the ui process's server.
	st := jetpool(t, env, "status", job, "--json")
	require.Zero(t, st.code, st.stderr)
	var s struct {
		Succeeded, Failed int
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	require.Equal(t, 200, s.Succeeded)
	require.Zero(t, s.Failed)

	ui.signal(t, syscall.SIGTERM)
	require.Zero(t, ui.wait(t, 30*time.Second), ui.stderr.String())
}

// A job steered from the dashboard in a real headless Chromium: paused,
// resumed, reprioritised and cancelled with the job page's buttons (the cancel asks
// first), the page showing each state; `jetpool status` agrees.
func TestDashboardSteeringInChromium(t *testing.T) {
	browser := chromium(t)
	dir := t.TempDir()
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_LOG_LEVEL": "warn"}
	wf := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wf, []byte("providers:\n  sim: {kind: sim}\ndefaults: {provider: sim, model: sim-1}\nactions:\n  - name: a\n    prompt: \"{{ .text }}\"\n"), 0o600))
	d := jetpool(t, env, "dispatch", wf, "--input", "../examples/quickstart/records.jsonl", "--job", "steered", "--no-preflight")
	require.Zero(t, d.code, d.stderr)

	ui := start(t, env, "ui", "--addr", "127.0.0.1:0")
	url := ui.waitOutput(t, regexp.MustCompile(`jetpool ui on (http://\S+)`), 30*time.Second)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 2*time.Minute)
	defer cancel()
	waitContains := func(sel, want string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			expr := fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '').includes(%q)`, sel, want)
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1400, 1000),
		chromedp.Navigate(url+"#/job/steered"),
		waitContains(`#card-queued .v`, "200"),
		chromedp.Click(chromedp.CSS(`#job-pause`)),
		waitContains(`#steered`, "Paused"),
		waitContains(`#card-status .v`, "paused"),
		chromedp.Click(chromedp.CSS(`#job-resume`)),
		waitContains(`#steered`, "Resumed."),
		chromedp.SetValue(chromedp.CSS(`#priority-value`), "9"),
		chromedp.Click(chromedp.CSS(`#job-priority`)),
		waitContains(`#steered`, "Priority 9."),
		chromedp.Click(chromedp.CSS(`#job-cancel`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-cancel`)),
		chromedp.Click(chromedp.CSS(`#confirm-cancel`)),
		waitContains(`#steered`, "Cancelled: no new calls"),
		waitContains(`#card-status .v`, "cancelled"),
	))
	// A worker takes the queued records: they end cancelled, counted
	// apart from the failed ones.
	w := start(t, env, "worker", "--concurrency", "4")
	require.NoError(t, chromedp.Do(ctx,
		waitContains(`#card-cancelled .v`, "200"),
	))
	w.signal(t, syscall.SIGTERM)
	require.Zero(t, w.wait(t, 30*time.Second), w.stderr.String())
	require.NoError(t, chromedp.Cancel(bctx))

	st := jetpool(t, env, "status", "steered", "--json")
	require.Zero(t, st.code, st.stderr)
	var s struct {
		Status, Reason    string
		Priority          int
		Cancelled, Failed int64
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	require.Equal(t, 9, s.Priority)
	require.EqualValues(t, 200, s.Cancelled)
	require.Zero(t, s.Failed, "cancelled, not failed")
	require.Equal(t, "cancelled", s.Status)
	require.Equal(t, "cancelled from the dashboard", s.Reason)
	ui.signal(t, syscall.SIGTERM)
	require.Zero(t, ui.wait(t, 30*time.Second), ui.stderr.String())
}
