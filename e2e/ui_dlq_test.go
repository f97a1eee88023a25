package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// One dead letter replayed and another purged with their own buttons in a
// real headless Chromium (the purge asks first), a third replayed from its
// own page: the replayed records are worked by the ui process, with the
// key fixed, and succeed; the purged
// one leaves the DLQ and stays failed, which `jetpool status` says. The
// job's page draws its rate chart from the dashboard's polls, and the
// chart is there again at once after a reload.
func TestDashboardDeadLetterButtonsInChromium(t *testing.T) {
	browser := chromium(t)
	env, job, failed := quickstartFailed(t)
	require.GreaterOrEqual(t, failed, 3, "the quickstart's auth faults dead-letter a few records")

	uiEnv := map[string]string{"SIM_API_KEY": "sk-sim-fixed"} // "fix the key"
	for k, v := range env {
		if k != "SIM_API_KEY" {
			uiEnv[k] = v
		}
	}
	ui := start(t, uiEnv, "ui", "--addr", "127.0.0.1:0")
	url := ui.waitOutput(t, regexp.MustCompile(`jetpool ui on (http://\S+)`), 30*time.Second)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()
	// until polls the page (it refreshes itself every two seconds) until
	// the JavaScript expression holds.
	until := func(expr string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingInterval(100*time.Millisecond)))
			return err
		})
	}
	text := func(sel, want string) chromedp.Action[chromedp.Void] {
		return until(fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? '').includes(%q)`, sel, want))
	}

	require.NoError(t, chromedp.Do(ctx,
		chromedp.EmulateViewport(1400, 1000),
		chromedp.Navigate(url+"#/dlq?job="+job),
		text(`#matched`, fmt.Sprintf("%d match", failed)),
	))
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('main table tbody tr')].map((r) => r.id)`))
	require.NoError(t, err)
	require.Len(t, ids, failed)
	replayed, purged, third := strings.TrimPrefix(ids[0], "dl-"), strings.TrimPrefix(ids[1], "dl-"), strings.TrimPrefix(ids[2], "dl-")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#replay-`+replayed)),
		text(`#replayed-one`, "Replayed dead letter "+replayed),
		text(`#replayed-one`, "this process works them"),
		text(`#matched`, fmt.Sprintf("%d match", failed-1)),
		chromedp.Click(chromedp.CSS(`#purge-`+purged)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm-purge-`+purged)),
	))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main table tbody tr').length`))
	require.NoError(t, err)
	require.Equal(t, failed-1, n, "the purge asks first: nothing purged yet")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#confirm-purge-`+purged)),
		text(`#purged-one`, "Purged dead letter "+purged),
		text(`#matched`, fmt.Sprintf("%d match", failed-2)),
		until(fmt.Sprintf(`!document.getElementById('dl-%s') && !document.getElementById('dl-%s')`, replayed, purged)),
	))
	// A dead letter's own page has the same buttons.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(url+"#/dlq/"+third),
		chromedp.WaitVisible(chromedp.CSS(`#replay-`+third)),
		chromedp.Click(chromedp.CSS(`#replay-`+third)),
		text(`#replayed-one`, "Replayed dead letter "+third),
	))

	// The job's page: the replayed records worked, the purged one still
	// failed and out of the DLQ; the chart drawn from two readings on.
	card := func(name string) string { return `#card-` + name + ` .v` }
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(url+"#/job/"+job),
		text(card("succeeded"), strconv.Itoa(200-failed+2)),
		text(card("failed"), strconv.Itoa(failed-2)),
		text(card("dead-letters"), strconv.Itoa(failed-3)),
		until(`Number(document.querySelector('#history-chart')?.dataset.samples ?? 0) >= 3`),
		chromedp.WaitVisible(chromedp.CSS(`#history-chart polyline.rate`)),
	))
	samples, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.querySelector('#history-chart').dataset.samples)`))
	require.NoError(t, err)
	// Reloaded, the page's first chart has every reading already (a
	// history kept in the page would start again from one).
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Reload(),
		until(`!!document.querySelector('#history-chart, #history-empty')`),
	))
	again, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Number(document.querySelector('#history-chart')?.dataset.samples ?? 0)`))
	require.NoError(t, err)
	require.GreaterOrEqual(t, again, samples, "the history survives a reload")
	require.NoError(t, chromedp.Cancel(bctx))

	st := jetpool(t, env, "status", job, "--json")
	require.Zero(t, st.code, st.stderr)
	var s struct {
		Succeeded, Failed int
		DeadLetters       int `json:"dead_letters"`
	}
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &s), st.stdout)
	require.Equal(t, 200-failed+2, s.Succeeded)
	require.Equal(t, failed-2, s.Failed, "the purged record stays failed")
	require.Equal(t, failed-3, s.DeadLetters)
	st = jetpool(t, env, "status", job)
	require.Zero(t, st.code, st.stderr)
	require.Contains(t, st.stdout, fmt.Sprintf("(%d in the DLQ; 1 purged: failed, not replayable)", failed-3))

	ui.signal(t, syscall.SIGTERM)
	require.Zero(t, ui.wait(t, 30*time.Second), ui.stderr.String())
}
