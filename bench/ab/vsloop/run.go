package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
)

// once runs one side on a fresh server: fill its queue, then time its
// process from its start to the last result stored.
func (h *harness) once(side string) (outcome, error) {
	dir, url, server, done, err := h.fresh()
	if err != nil {
		return outcome{}, err
	}
	defer done()
	nc, err := nats.Connect(url)
	if err != nil {
		return outcome{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return outcome{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	var cmd *exec.Cmd
	var results string
	switch {
	case side == "loop" || side == "loop:shared":
		sharedShape = side == "loop:shared"
		if err := fillLoop(ctx, js, h.in); err != nil {
			return outcome{}, fmt.Errorf("fill: %w", err)
		}
		results = loopResults
		cmd = exec.Command(h.self, "loop", "-url", url, "-conc", fmt.Sprint(h.conc), "-n", fmt.Sprint(h.n), fmt.Sprintf("-shared=%t", sharedShape))
	default:
		bin, wf, ok := jetpoolSide(side)
		if !ok {
			return outcome{}, fmt.Errorf("side %q: want loop or jetpool:BIN:WORKFLOW", side)
		}
		job, err := dispatch(bin, wf, h.in, url, dir)
		if err != nil {
			return outcome{}, err
		}
		results = broker.StreamResults
		cmd = exec.Command(bin, "worker", "--concurrency", fmt.Sprint(h.conc), "--job", job)
		cmd.Env = append(jetpoolEnv(url, dir), strings.Split(h.workerEnv, ",")...)
	}
	base, err := msgs(ctx, js, results)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return outcome{}, err
	}
	before := server.cpu()
	profiled := h.profileServer(server, side)
	o, err := h.timeProcess(ctx, js, cmd, results, base+uint64(h.n), dir)
	o.serverCPU = server.cpu() - before
	if perr := <-profiled; err == nil && perr != nil {
		err = fmt.Errorf("server profile: %w", perr)
	}
	return o, err
}

// profileServer starts a CPU profile of the server (-server-profile), from
// now for -profile-seconds, written to DIR/SIDE-ROUND.pprof; the channel
// says when it is written. Nothing is profiled without -server-profile.
func (h *harness) profileServer(server *serverProc, side string) <-chan error {
	done := make(chan error, 1)
	if h.profile == "" {
		done <- nil
		return done
	}
	name := strings.NewReplacer("/", "_", ":", "_", ".", "").Replace(side)
	path := filepath.Join(h.profile, fmt.Sprintf("%s-%d.pprof", name, h.round))
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", server.profPort, h.profileSecs))
		if err != nil {
			done <- err
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(path)
		if err != nil {
			done <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		done <- err
	}()
	return done
}

// timeProcess starts cmd and waits until the stream results holds want
// messages; then it stops cmd (SIGTERM) and reads its rusage.
func (h *harness) timeProcess(ctx context.Context, js jetstream.JetStream, cmd *exec.Cmd, results string, want uint64, dir string) (outcome, error) {
	logf, err := os.Create(filepath.Join(dir, "process.log"))
	if err != nil {
		return outcome{}, err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return outcome{}, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var took, at10, at90 time.Duration
	first := want - uint64(h.n)
	mark := func(n uint64) {
		since := time.Since(start)
		if at10 == 0 && n >= first+uint64(h.n)/10 {
			at10 = since
		}
		if at90 == 0 && n >= first+uint64(h.n)*9/10 {
			at90 = since
		}
		if n >= want {
			took = since
		}
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for took == 0 {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return outcome{}, ctx.Err()
		case err := <-exited:
			if n, _ := msgs(ctx, js, results); n >= want {
				mark(n)
				exited <- err
				continue
			}
			b, _ := os.ReadFile(logf.Name())
			return outcome{}, fmt.Errorf("exited before the last result (%v): %s", err, tail(b))
		case <-tick.C:
			if n, err := msgs(ctx, js, results); err == nil {
				mark(n)
			}
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	o := outcome{rate: float64(h.n) / took.Seconds(), sustained: 0.8 * float64(h.n) / (at90 - at10).Seconds()}
	addUsage(&o, cmd.ProcessState)
	return o, nil
}

func tail(b []byte) string {
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return string(b)
}

func msgs(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

func jetpoolEnv(url, dir string) []string {
	return append(os.Environ(), "JETPOOL_NATS_URL="+url, "JETPOOL_LOG_LEVEL=warn", "JETPOOL_DATA_DIR="+filepath.Join(dir, "jp"))
}

// dispatch queues the job with `jetpool dispatch` and returns its id.
func dispatch(bin, wf, in, url, dir string) (string, error) {
	cmd := exec.Command(bin, "dispatch", wf, "--input", in)
	cmd.Env = jetpoolEnv(url, dir)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("dispatch: %v: %s", err, errb.String())
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) == 0 {
		return "", errors.New("dispatch printed no job id")
	}
	return lines[len(lines)-1], nil
}

// fillLoop queues every input line on the loop's work stream.
func fillLoop(ctx context.Context, js jetstream.JetStream, in string) error {
	if _, err := loopStreams(ctx, js); err != nil {
		return err
	}
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		if _, err := js.PublishAsync(loopWorkSubject(), append([]byte(nil), sc.Bytes()...)); err != nil {
			return err
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	return sc.Err()
}

// fresh makes a temporary directory and starts a server with its store in
// it; done stops the server and removes the directory.
func (h *harness) fresh() (dir, url string, server *serverProc, done func(), err error) {
	if dir, err = os.MkdirTemp("", "vsloop"); err != nil {
		return "", "", nil, nil, err
	}
	if url, server, err = h.startServer(dir); err != nil {
		os.RemoveAll(dir)
		return "", "", nil, nil, err
	}
	return dir, url, server, func() { server.stop(); os.RemoveAll(dir) }, nil
}

// startServer starts a nats-server with JetStream on a free loopback port
// and a store in dir.
func (h *harness) startServer(dir string) (string, *serverProc, error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	conf := filepath.Join(dir, "ns.conf")
	body := fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q }\n", port, filepath.Join(dir, "store"))
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return "", nil, err
	}
	var profPort int
	args := []string{"-c", conf}
	if h.profile != "" {
		if profPort, err = freePort(); err != nil {
			return "", nil, err
		}
		args = append(args, "--profile", fmt.Sprint(profPort))
	}
	cmd := exec.Command(h.server, args...)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	sp := &serverProc{cmd: cmd, profPort: profPort}
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		nc, err := nats.Connect(url)
		if err != nil {
			continue
		}
		js, _ := jetstream.New(nc)
		_, err = js.AccountInfo(context.Background())
		nc.Close()
		if err == nil {
			return url, sp, nil
		}
	}
	sp.stop()
	return "", nil, errors.New("nats-server did not start")
}

type serverProc struct {
	cmd      *exec.Cmd
	profPort int // its profiling port, 0 when not profiled
}

// freePort is a loopback TCP port free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *serverProc) stop() { _ = s.cmd.Process.Signal(syscall.SIGTERM); _ = s.cmd.Wait() }

// cpu is the server's user+system time so far, from /proc (clock ticks of
// 10 ms).
func (s *serverProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// jetpoolSide splits a side jetpool:BIN:WORKFLOW (ok false: not one).
func jetpoolSide(side string) (bin, wf string, ok bool) {
	parts := strings.SplitN(side, ":", 3)
	if len(parts) != 3 || parts[0] != "jetpool" {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// addUsage sets o's CPU and peak RSS from the exited process's rusage.
func addUsage(o *outcome, ps *os.ProcessState) {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		o.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		o.maxRSSKB = ru.Maxrss
	}
}
