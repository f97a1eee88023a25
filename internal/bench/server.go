package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
)

// server is where a throughput round runs: the bench's embedded server (in
// this process, reached over its in-process connection), or, with
// Options.External, a nats-server process of its own, reached over loopback
// TCP as users run one.
type server struct {
	name string // "" for the embedded server; its rows' suffix otherwise
	b    *broker.Broker
	d    *dispatcher.Dispatcher
	url  string
	pid  int // the external server's process, whose CPU counts in each measure; 0 embedded
}

// meter starts metering a measure's CPU: this process, its waited-for
// children and the server process.
func (s *server) meter() func(n int) cpuUse { return meterCPU(s.pid) }

// row names a throughput row of s.
func (s *server) row(name string) string {
	if s.name == "" {
		return name
	}
	return name + " — " + s.name
}

// externalName is the suffix of the external server's rows.
const externalName = "external nats-server (loopback TCP)"

// findNatsServer is the nats-server binary of the external rows: p when
// set, else nats-server on PATH or in $GOPATH/bin, else "".
func findNatsServer(p string) string { return findTool(p, "nats-server") }

// startExternal starts a nats-server process with JetStream on a store
// under dir, syncing as the embedded server does (sync: "always" or a
// duration), connects to it and makes jetpool's streams. stop ends it.
func (h *harness) startExternal(ctx context.Context, cfg broker.Config, bin, sync string) (*server, func(), error) {
	dir := filepath.Join(h.dir, "external")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, nil, err
	}
	conf := filepath.Join(dir, "nats-server.conf")
	syncLine := fmt.Sprintf("sync_interval: %q", sync)
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: \"127.0.0.1:-1\"\nmax_payload: 8MB\nports_file_dir: %q\njetstream {\n  store_dir: %q\n  %s\n}\n",
		dir, filepath.Join(dir, "store"), syncLine)), 0o600); err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stderr = nil
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("external nats-server %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	url, err := portsFileURL(ctx, filepath.Join(dir, fmt.Sprintf("%s_%d.ports", filepath.Base(bin), cmd.Process.Pid)), exited)
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("external nats-server %s: %w", bin, err)
	}
	if cfg.Batched() {
		cfg.BatchWrites = "on" // it syncs every write as the embedded server does: batch there too
	}
	cfg.NATSURL = url
	b, err := broker.Connect(ctx, cfg, h.log)
	if err != nil {
		stop()
		return nil, nil, err
	}
	if err := b.Ensure(ctx); err != nil {
		b.Close()
		stop()
		return nil, nil, err
	}
	s := &server{name: externalName, b: b, d: &dispatcher.Dispatcher{B: b, Log: h.log}, url: url, pid: cmd.Process.Pid}
	return s, func() { b.Close(); stop() }, nil
}

// portsFileURL waits (10 s at most) for the ports file a nats-server
// started with ports_file_dir writes, and returns its client URL.
func portsFileURL(ctx context.Context, path string, exited <-chan error) (string, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, err := os.ReadFile(path)
		if err == nil {
			var ports struct {
				Nats []string `json:"nats"`
			}
			if json.Unmarshal(data, &ports) == nil && len(ports.Nats) > 0 {
				return ports.Nats[0], nil
			}
		}
		select {
		case err := <-exited:
			return "", fmt.Errorf("exited before it listened: %v", err)
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", errors.New("no ports file after 10s: " + path)
		}
	}
}

// procCPU is the CPU a running process has used (user and system, from
// /proc/PID/stat), 0 when it cannot be read.
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: the fields start after its ")".
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks
}

// The external server's rounds run in a process of their own (a child
// `jetpool bench --round-on URL`), so that the clients measured there, raw
// and jetpool, have a heap of their own, as a deployed one does, rather
// than the bench process's, which holds the embedded server's state.

// externalRound runs round r on the external server s in a child process
// and returns its figures.
func (h *harness) externalRound(ctx context.Context, s *server, r int) (round, error) {
	args := []string{"--round", strconv.Itoa(r), "--nats", h.cli}
	if h.o.WorkProcess {
		args = append(args, "--work-process")
	}
	if h.o.CPUProfile != "" && r == 0 {
		args = append(args, "--cpuprofile-work", h.o.CPUProfile+".external")
	}
	var rd round
	out, err := h.child(ctx, s, args...)
	if err == nil {
		err = rd.UnmarshalJSON(out)
	}
	if err != nil {
		return round{}, fmt.Errorf("external round %d: %w", r, err)
	}
	return rd, nil
}

// child runs `jetpool bench --round-on URL` against the external server s
// with the run's records, size and concurrency and the arguments args (a
// round, or the pairs), and returns what it prints: its figures as JSON.
func (h *harness) child(ctx context.Context, s *server, args ...string) ([]byte, error) {
	args = append([]string{"bench", "--round-on", s.url, "--server-pid", strconv.Itoa(s.pid),
		"--dir", h.dir, "--records", strconv.Itoa(h.o.Records), "--size", strconv.Itoa(h.o.Size),
		"--concurrency", strconv.Itoa(h.o.Concurrency)}, args...)
	c := exec.CommandContext(ctx, h.o.Self, args...)
	c.Env = append(os.Environ(), "JETPOOL_LOG_LEVEL=error", "JETPOOL_CPUPROFILE=", "JETPOOL_BATCH_WRITES="+s.b.Cfg.BatchWrites)
	c.Stderr = h.out
	out, err := c.Output()
	if err != nil {
		return nil, fmt.Errorf("jetpool %s: %w", strings.Join(args, " "), err)
	}
	return out, nil
}

// RunRound is the child of an external round (Options.RoundOn): it runs one
// throughput round against the server at RoundOn, the records and workflow
// being those the parent wrote in Dir, and returns its figures as JSON.
func RunRound(ctx context.Context, cfg broker.Config, o Options) ([]byte, error) {
	o = o.withDefaults()
	cfg.NATSURL = o.RoundOn
	cfg.LogLevel = "error"
	log := cfg.Logger()
	b, err := broker.Connect(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := b.Ensure(ctx); err != nil {
		return nil, err
	}
	s := &server{name: externalName, b: b, d: &dispatcher.Dispatcher{B: b, Log: log}, url: o.RoundOn, pid: o.ServerPID}
	h := &harness{o: o, cfg: cfg, out: o.Progress, emb: s, log: log, dir: o.Dir, cli: o.NatsCLI}
	wf, err := writeWorkflow(h.dir, "zero", "reply: ok", "", "")
	if err != nil {
		return nil, err
	}
	if o.Pairs > 0 {
		rs, err := h.pairsOn(ctx, s, wf, filepath.Join(h.dir, "records.jsonl"))
		if err != nil {
			return nil, err
		}
		return json.Marshal(rs)
	}
	rd, err := h.round(ctx, s, wf, filepath.Join(h.dir, "records.jsonl"), o.Round)
	if err != nil {
		return nil, err
	}
	return rd.MarshalJSON()
}

// cells names every figure of a round, for its JSON.
func (rd *round) cells() (rates map[string]*float64, cpus map[string]*cpuUse) {
	return map[string]*float64{
			"raw_pub": &rd.rawPub, "raw_consume": &rd.rawConsume, "raw_consume_wq": &rd.rawConsumeWQ, "go_pub": &rd.goPub, "go_pub_paired": &rd.goPubPaired,
			"go_consume": &rd.goConsume, "floor": &rd.floor, "loop": &rd.loop, "loop_work": &rd.loopWork, "loop_whole": &rd.loopWhole, "inline": &rd.inline, "dispatch": &rd.dispatch,
			"work": &rd.work, "work_child": &rd.workChild, "both": &rd.both, "e2e": &rd.e2e,
		}, map[string]*cpuUse{
			"raw_consume": &rd.rawConsumeCPU, "raw_consume_wq": &rd.rawConsumeWQCPU, "floor": &rd.floorCPU, "loop": &rd.loopCPU, "loop_work": &rd.loopWorkCPU, "loop_whole": &rd.loopWholeCPU,
			"inline": &rd.inlineCPU, "work": &rd.workCPU, "work_child": &rd.workChildCPU,
		}
}

type roundJSON struct {
	Rates map[string]float64    `json:"rates"`
	CPU   map[string][4]float64 `json:"cpu"` // ns a message, cores busy, bytes allocated a message, the server's ns a message
}

func (rd round) MarshalJSON() ([]byte, error) {
	rates, cpus := rd.cells()
	j := roundJSON{Rates: map[string]float64{}, CPU: map[string][4]float64{}}
	for k, p := range rates {
		j.Rates[k] = *p
	}
	for k, p := range cpus {
		j.CPU[k] = [4]float64{float64(p.perMsg), p.cores, p.alloc, float64(p.server)}
	}
	return json.Marshal(j)
}

func (rd *round) UnmarshalJSON(data []byte) error {
	var j roundJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	rates, cpus := rd.cells()
	for k, p := range rates {
		*p = j.Rates[k]
	}
	for k, p := range cpus {
		*p = cpuUse{perMsg: time.Duration(j.CPU[k][0]), cores: j.CPU[k][1], alloc: j.CPU[k][2], server: time.Duration(j.CPU[k][3])}
	}
	return nil
}
