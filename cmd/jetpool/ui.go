package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/ui"
)

func cmdUI(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "ui", "[--addr 127.0.0.1:8080] [--read-only]",
		"Serve the web dashboard: jobs, a job's records, dead letters (replay and purge), providers and workers.\n"+
			"Loopback only unless "+ui.TokenEnv+" holds a token, which every request must then carry.\n"+
			"With the embedded server (JETPOOL_NATS_URL unset) other local commands use this process's server while it\n"+
			"runs, and dead letters replayed from the page are worked here, as 'jetpool retry' works them.")
	addr := fs.String("addr", "127.0.0.1:8080", "listen address; off loopback only with "+ui.TokenEnv+" set")
	readOnly := fs.Bool("read-only", false, "hide and refuse replay and purge")
	conc := fs.Int("concurrency", 0, "with the embedded server: concurrent model calls when working replayed records (default $JETPOOL_CONCURRENCY)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageErr("unexpected arguments %v", pos)
	}
	if err := ui.CheckAddr(*addr, os.Getenv(ui.TokenEnv)); err != nil {
		return configErr(err)
	}
	b, err := connect(ctx, e)
	if err != nil {
		return err
	}
	defer b.Close()
	var replayed func([]string) string
	if b.Embedded() {
		// As `jetpool server` does: `jetpool status`, `retry` or `worker`
		// with the same data dir connect here instead of finding it busy.
		if err := b.WriteServerFile(b.Server().ClientURL()); err != nil {
			return err
		}
		rw := &replayWork{ctx: ctx, e: e, c: e.client(b), conc: *conc, busy: map[string]bool{}, again: map[string]bool{}}
		defer rw.wait()
		replayed = rw.replayed
	}
	stop, err := serveUI(e, b, *addr, *readOnly, replayed)
	if err != nil {
		return configErr(err)
	}
	defer stop()
	<-ctx.Done()
	return nil
}

// uiFlags are the --ui flags of `jetpool server` and `worker`.
type uiFlags struct {
	addr     *string
	readOnly *bool
}

func newUIFlags(fs *flag.FlagSet) uiFlags {
	return uiFlags{fs.String("ui", "", "also serve the web dashboard on this address (e.g. 127.0.0.1:8080; see 'jetpool ui -h')"),
		fs.Bool("ui-read-only", false, "the dashboard of --ui hides and refuses replay and purge")}
}

// check refuses an address off loopback without a token before anything starts.
func (f uiFlags) check() error {
	if *f.addr == "" {
		return nil
	}
	if err := ui.CheckAddr(*f.addr, os.Getenv(ui.TokenEnv)); err != nil {
		return configErr(err)
	}
	return nil
}

func (f uiFlags) serve(e *env, b *broker.Broker) (stop func(), err error) {
	stop, err = serveUI(e, b, *f.addr, *f.readOnly, nil)
	if err != nil {
		return nil, configErr(err)
	}
	return stop, nil
}

// serveUI serves the dashboard on addr until the returned stop is called
// (nothing when addr is empty): `jetpool ui`, and `server` and `worker`
// with --ui.
func serveUI(e *env, b *broker.Broker, addr string, readOnly bool, replayed func([]string) string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	s, err := ui.Listen(addr, ui.Config{Client: e.client(b), ReadOnly: readOnly, Token: os.Getenv(ui.TokenEnv), Replayed: replayed, Log: e.log})
	if err != nil {
		return nil, err
	}
	mode := ""
	if readOnly {
		mode = " (read-only)"
	}
	fmt.Fprintf(e.stdout, "jetpool ui on %s%s\n", s.URL(), mode)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	}, nil
}

// replayWork works the jobs replayed from the dashboard in this process
// when it hosts the embedded server, as `jetpool retry` does there
// (workAndReport): one pool per job until the job is finished again.
type replayWork struct {
	ctx  context.Context
	e    *env
	c    *jp.Client
	conc int

	mu    sync.Mutex
	busy  map[string]bool // jobs being worked
	again map[string]bool // replayed again while being worked
	wg    sync.WaitGroup
}

func (rw *replayWork) replayed(jobs []string) string {
	rw.mu.Lock()
	defer rw.mu.Unlock()
	for _, j := range jobs {
		if rw.busy[j] {
			// Its pool may be deciding that the job is finished right
			// now: it runs once more when done.
			rw.again[j] = true
			continue
		}
		rw.busy[j] = true
		rw.wg.Add(1)
		go rw.work(j)
	}
	return "this process works them (it hosts the embedded server), as `jetpool retry` does"
}

func (rw *replayWork) work(job string) {
	defer rw.wg.Done()
	for {
		err := exitOnFailed(workAndReport(rw.ctx, rw.e, rw.c, job, rw.conc, "", false, time.Now(), nil), true)
		if err != nil {
			rw.e.log.Warn().Err(err).Str("job", job).Msg("working the replayed records")
		}
		rw.mu.Lock()
		if !rw.again[job] || rw.ctx.Err() != nil {
			delete(rw.busy, job)
			delete(rw.again, job)
			rw.mu.Unlock()
			return
		}
		delete(rw.again, job)
		rw.mu.Unlock()
	}
}

// wait waits for the pools; they stop when the command's context ends.
func (rw *replayWork) wait() { rw.wg.Wait() }
