package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// onceDispatch times one enqueue of the input on a fresh server, as a
// whole process: `jetpool dispatch` (side jetpool:BIN:WORKFLOW) or
// `nats bench js pub async --dedup` of as many messages of the input's mean
// line size (side natsbench).
func (h *harness) onceDispatch(side string) (outcome, error) {
	dir, url, server, done, err := h.fresh()
	if err != nil {
		return outcome{}, err
	}
	defer done()
	var cmd *exec.Cmd
	switch {
	case side == "natsbench":
		st, err := os.Stat(h.in)
		if err != nil {
			return outcome{}, err
		}
		cmd = exec.Command("nats", "bench", "js", "pub", "async", "bench.pub", "--msgs", fmt.Sprint(h.n),
			"--size", fmt.Sprint(st.Size()/int64(h.n)), "--dedup", "--create", "--stream", "BENCHPUB", "--no-progress", "-s", url)
	default:
		bin, wf, ok := jetpoolSide(side)
		if !ok {
			return outcome{}, fmt.Errorf("side %q: want natsbench or jetpool:BIN:WORKFLOW", side)
		}
		cmd = exec.Command(bin, "dispatch", wf, "--input", h.in)
		cmd.Env = jetpoolEnv(url, dir)
	}
	before := server.cpu()
	out, err := os.Create(filepath.Join(dir, "out"))
	if err != nil {
		return outcome{}, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(out.Name())
		return outcome{}, fmt.Errorf("%v: %s", err, tail(b))
	}
	took := time.Since(start)
	o := outcome{rate: float64(h.n) / took.Seconds(), serverCPU: server.cpu() - before}
	o.sustained = o.rate
	addUsage(&o, cmd.ProcessState)
	return o, nil
}
