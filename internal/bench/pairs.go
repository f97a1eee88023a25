package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/profile"
	"github.com/jetpool/jetpool/workflow"
)

// The pairs (Options.Pairs) measure the one ratio the work target
// is about — jetpool's zero-latency work against the raw work loop with
// jetpool's record work — and nothing else: the two back to back, Pairs
// times, the order turned each time (loop then jetpool, jetpool then loop,
// …), so that each pair's ratio is of two figures taken seconds apart.
// Between the two runs the same loop storing jetpool's whole result
// (inlineWork.whole): the loop stores the answer and its usage, 280 bytes,
// where jetpool stores 620, its accounting with them (recovery, the
// action's account, totals, finish reason, line, revision, the record's
// sum); the issue asks for "the same storage", and the second ratio is of
// that. A
// full round puts the dispatch and the paired publisher between the two,
// 10–20 s on this machine, where a single figure moves by a fifth with the
// hour.

// pairs runs the pairs on the embedded server and, with Options.External,
// on a nats-server process of its own (in a child process, as the
// external rounds), and adds their rows.
func (h *harness) pairs(ctx context.Context) error {
	in, wf, err := h.zeroWork()
	if err != nil {
		return err
	}
	rs, err := h.pairsOn(ctx, h.emb, wf, in)
	if err != nil {
		return err
	}
	h.pairRows(h.emb, rs)
	if !h.o.External {
		return nil
	}
	ext, stop, err := h.externalServer(ctx)
	if err != nil {
		return err
	}
	defer stop()
	if rs, err = h.externalPairs(ctx, ext); err != nil {
		return err
	}
	h.pairRows(ext, rs)
	return nil
}

// pairsOn runs the pairs on s: each a round with two figures, the loop
// with the record work's and jetpool's work.
func (h *harness) pairsOn(ctx context.Context, s *server, wf *workflow.Workflow, in string) (rounds, error) {
	iw, err := newInlineWork(wf)
	if err != nil {
		return nil, err
	}
	whole, err := newInlineWork(wf)
	if err != nil {
		return nil, err
	}
	whole.whole = true
	var rs rounds
	for i := range h.o.Pairs {
		var rd round
		// The first pair is profiled (Options.CPUProfile): jetpool's work
		// to the file, the loop's to the file + ".loop" (once its stream
		// is filled), for pprof's -diff_base.
		// Its heap profiles (Options.HeapProfile) likewise, the loop's
		// to the file + ".loop" and ".loop.before".
		prof := &profiler{on: h.o.CPUProfile != "" && i == 0}
		heap := i == 0 && h.o.HeapProfile != ""
		loop := func() (err error) {
			rd.loopWork, rd.loopWorkCPU, err = rawLoop(ctx, s, h.o.Records, h.o.Size, h.o.Concurrency, iw,
				func() {
					if heap {
						profile.WriteHeap(h.o.HeapProfile + ".loop.before")
					}
					prof.start(h.o.CPUProfile + ".loop")
				})
			if heap && err == nil {
				profile.WriteHeap(h.o.HeapProfile + ".loop")
			}
			return errors.Join(prof.end(), err)
		}
		work := func() error {
			job := fmt.Sprintf("bench-pair-%d", i)
			if _, err := s.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: job}); err != nil {
				return err
			}
			defer h.workerGC()()
			// A heap profile before and after the first pair's work
			// (Options.HeapProfile): what it allocated is their
			// difference (pprof -sample_index=alloc_space -diff_base).
			if heap {
				profile.WriteHeap(h.o.HeapProfile + ".before")
				defer profile.WriteHeap(h.o.HeapProfile)
			}
			prof.start(h.o.CPUProfile)
			run, err := h.work(ctx, s, job, h.o.Concurrency, h.o.Records)
			if err = errors.Join(prof.end(), err); err != nil {
				return err
			}
			// Gone before the next pair, as the loop's streams are: each
			// pair starts on the same store (the results of earlier jobs
			// left there lowered jetpool's share pair after pair on the
			// embedded server, whose state is this heap's).
			if _, err := s.b.DeleteJob(ctx, job); err != nil {
				return err
			}
			rd.work, rd.workCPU = float64(h.o.Records)/run.total.Seconds(), run.cpu
			return nil
		}
		// The loop again, storing the whole result jetpool stores
		// (inlineWork.whole), between the two: its figure is as near
		// jetpool's in time as the loop's.
		loopWhole := func() (err error) {
			rd.loopWhole, rd.loopWholeCPU, err = rawLoop(ctx, s, h.o.Records, h.o.Size, h.o.Concurrency, whole, nil)
			return err
		}
		var stored [3]float64 // bytes the server took in a record: the loop's, the whole loop's, jetpool's
		order := []func() error{stores(s, h.o.Records, &stored[0], loop), stores(s, h.o.Records, &stored[1], loopWhole), stores(s, h.o.Records, &stored[2], work)}
		if i%2 == 1 {
			slices.Reverse(order)
		}
		for _, f := range order {
			if err := f(); err != nil {
				return nil, err
			}
		}
		in := ""
		if stored[0] > 0 {
			in = fmt.Sprintf(" (the server took in %.0f, %.0f and %.0f B a record)", stored[0], stored[1], stored[2])
		}
		fmt.Fprintf(h.out, "   pair %d of %d%s: the loop with the record work %.0f/s (%v a message), storing jetpool's whole result %.0f/s (%v), jetpool %.0f/s (%v): %.0f%%, %.0f%%%s\n",
			i+1, h.o.Pairs, suffix(s), rd.loopWork, rd.loopWorkCPU.perMsg, rd.loopWhole, rd.loopWholeCPU.perMsg, rd.work, rd.workCPU.perMsg,
			100*rd.work/rd.loopWork, 100*rd.work/rd.loopWhole, in)
		rs = append(rs, rd)
	}
	return rs, nil
}

// profiler profiles one measure (on: of the first pair).
type profiler struct {
	on   bool
	stop func()
	err  error
}

func (p *profiler) start(path string) {
	if !p.on {
		return
	}
	if p.stop, p.err = profile.StartCPU(path); p.err != nil {
		p.err = fmt.Errorf("--cpuprofile-work: %w", p.err)
	}
}

// end stops the profile, if one runs, and says whether it could start.
func (p *profiler) end() error {
	if p.stop != nil {
		p.stop()
		p.stop = nil
	}
	return p.err
}

// stores runs f and sets *in to the bytes the embedded server s took in
// over it, a record (left 0 on an external server).
func stores(s *server, n int, in *float64, f func() error) func() error {
	return func() error {
		srv := s.b.Server()
		if srv == nil {
			return f()
		}
		v0, err := srv.Varz(nil)
		if err != nil {
			return f()
		}
		if err := f(); err != nil {
			return err
		}
		if v1, err := srv.Varz(nil); err == nil {
			*in = float64(v1.InBytes-v0.InBytes) / float64(n)
		}
		return nil
	}
}

// suffix is " on NAME" for an external server s, "" for the embedded one.
func suffix(s *server) string {
	if s.name == "" {
		return ""
	}
	return " on the " + s.name
}

// pairRows adds the pairs' three rows on s: the loop's, the loop's storing
// jetpool's whole result, and jetpool's with its share of each pair by pair.
func (h *harness) pairRows(s *server, rs rounds) {
	loopWork := func(rd round) float64 { return rd.loopWork }
	loopWhole := func(rd round) float64 { return rd.loopWhole }
	h.addStat(rs, s.row(fmt.Sprintf("pairs: raw work loop with jetpool's record work, %d goroutines", h.o.Concurrency)), loopWork, "msgs/s",
		func(rd round) cpuUse { return rd.loopWorkCPU })
	h.addStat(rs, s.row(fmt.Sprintf("pairs: raw work loop with jetpool's record work, storing jetpool's whole result, %d goroutines", h.o.Concurrency)), loopWhole, "msgs/s",
		func(rd round) cpuUse { return rd.loopWholeCPU })
	h.addStat(rs, h.jetpoolRow(s, fmt.Sprintf("pairs: jetpool work, 0 ms latency, concurrency %d", h.o.Concurrency)), func(rd round) float64 { return rd.work }, "",
		func(rd round) cpuUse { return rd.workCPU }, ratio{"the raw work loop with the record work, pair by pair", loopWork},
		ratio{"the loop storing the whole result", loopWhole})
}

// externalPairs runs the pairs on the external server s in a child process
// (`jetpool bench --round-on URL --pairs N`) and returns its figures.
func (h *harness) externalPairs(ctx context.Context, s *server) (rounds, error) {
	args := []string{"--pairs", strconv.Itoa(h.o.Pairs)}
	if h.o.CPUProfile != "" {
		args = append(args, "--cpuprofile-work", h.o.CPUProfile+".external")
	}
	var rs []round
	out, err := h.child(ctx, s, args...)
	if err == nil {
		err = json.Unmarshal(out, &rs)
	}
	if err != nil {
		return nil, fmt.Errorf("external pairs: %w", err)
	}
	return rs, nil
}
