package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// bigJob dispatches and works a job of Options.Big records in child
// processes of the jetpool binary, and adds their peak RSS and the time
// `jetpool status` takes on it.
func (h *harness) bigJob(ctx context.Context) error {
	n := h.o.Big
	in := filepath.Join(h.dir, "big.jsonl")
	if err := writeRecords(in, n, h.o.Size); err != nil {
		return err
	}
	if _, err := writeWorkflow(h.dir, "big", "reply: ok", "", ""); err != nil {
		return err
	}
	start := time.Now()
	disp := h.selfCommand(ctx, h.emb, "dispatch", filepath.Join(h.dir, "big.yaml"), "--input", in, "--job", "bench-big", "--no-preflight")
	disp.Stdout = nil
	if err := disp.Start(); err != nil {
		return fmt.Errorf("dispatch child: %w", err)
	}
	dispHWM := watchHWM(disp.Process.Pid)
	if err := disp.Wait(); err != nil {
		return fmt.Errorf("dispatch child: %w", err)
	}
	dt := time.Since(start)
	h.add(fmt.Sprintf("big job: dispatch %d records (child process)", n), rate(float64(n)/dt.Seconds()),
		"peak RSS "+dispHWM())
	wk := h.selfCommand(ctx, h.emb, "worker", "--concurrency", strconv.Itoa(h.o.Concurrency), "--job", "bench-big")
	if err := wk.Start(); err != nil {
		return err
	}
	wkHWM := watchHWM(wk.Process.Pid)
	start = time.Now()
	werr := h.waitJob(ctx, h.emb, "bench-big")
	wt := time.Since(start)
	peak := wkHWM()
	_ = wk.Process.Signal(syscall.SIGTERM)
	_ = wk.Wait()
	if werr != nil {
		return werr
	}
	h.add(fmt.Sprintf("big job: work %d records (child worker)", n), rate(float64(n)/wt.Seconds()), "peak RSS "+peak)
	for range 3 {
		st := h.selfCommand(ctx, h.emb, "status", "bench-big", "--json")
		start = time.Now()
		if err := st.Run(); err != nil {
			return fmt.Errorf("status child: %w", err)
		}
		h.add("big job: `jetpool status bench-big --json`", time.Since(start).Round(time.Millisecond).String(), "wall time of the whole command")
	}
	return nil
}

// watchHWM samples a child's VmHWM (its own peak RSS) until the returned
// func is called, which reports the peak seen. The child's rusage maxrss is
// no good here: Linux carries the parent's high-water mark over fork and
// exec, so a child forked by a big process reports the parent's size.
func watchHWM(pid int) func() string {
	var mu sync.Mutex
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	read := func() {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "VmHWM:"), "kB")), 10, 64)
				mu.Lock()
				peak = max(peak, kb)
				mu.Unlock()
			}
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() string {
		read()
		close(stop)
		<-done
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("%d MiB", peak/1024)
	}
}
