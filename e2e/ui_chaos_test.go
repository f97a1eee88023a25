//go:build chaos

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// The dashboard of `jetpool ui` beside a `jetpool server` that hosts the
// store: when the server goes, the page says the store does not answer;
// once it is back (on another port), the page shows the job again.
func TestChaosDashboardReconnects(t *testing.T) {
	t.Parallel()
	browser := chromium(t)
	dir := t.TempDir()
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(dir, "data"), "JETPOOL_LOG_LEVEL": "warn"}
	host := func() *proc {
		srv := start(t, env, "server", "--port", "-1", "--http-port", "0")
		srv.waitOutput(t, regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`), 20*time.Second)
		return srv
	}
	srv := host()
	wf := filepath.Join(dir, "workflow.yaml")
	require.NoError(t, os.WriteFile(wf, []byte("providers:\n  sim: {kind: sim}\ndefaults: {provider: sim, model: sim-1}\nactions:\n  - name: a\n    prompt: \"{{ .text }}\"\n"), 0o600))
	d := jetpool(t, env, "dispatch", wf, "--input", "../examples/quickstart/records.jsonl", "--job", "kept", "--no-preflight")
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
	poll := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`a[href="#/job/kept"]`))))

	srv.signal(t, syscall.SIGTERM)
	require.Zero(t, srv.wait(t, 10*time.Second))
	require.NoError(t, chromedp.Do(ctx, poll(`(document.querySelector('main > .notice.error.load')?.textContent ?? '').includes('does not answer')`)))

	srv = host()
	require.NoError(t, chromedp.Do(ctx,
		poll(`document.querySelector('main > .notice.error.load') === null && document.querySelector('a[href="#/job/kept"]') !== null`)))
	require.NoError(t, chromedp.Cancel(bctx))
	ui.signal(t, syscall.SIGTERM)
	require.Zero(t, ui.wait(t, 30*time.Second), ui.stderr.String())
	srv.signal(t, syscall.SIGTERM)
	require.Zero(t, srv.wait(t, 10*time.Second))
}
