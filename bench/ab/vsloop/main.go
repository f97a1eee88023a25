// Command vsloop times a `jetpool worker` process from outside against the
// plain nats.go program a user would write for the same work (loop.go), or
// against another jetpool binary or workflow, in interleaved rounds: every
// run on a fresh nats-server of its own, the queue filled before the timed
// process starts, the time from its start to the last result stored as the
// server counts it. docs/performance.md has the runs.
//
//	go run ./bench/ab/vsloop -a jetpool:./jp:wf.yaml -b loop -in in100k.jsonl -conc 256 -rounds 6 [-hogs 2]
//
// A side is `loop` or `jetpool:BIN:WORKFLOW`. With -mode dispatch the
// enqueue is timed instead, as a whole process: `jetpool dispatch` against
// `nats bench js pub async --dedup` (side natsbench). CPU is given as the timed
// process's plus the server's while it ran. -hogs N runs N CPU-bound
// processes beside both for the whole run. Round 0 is a warm-up, not counted.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "loop" {
		fs := flag.NewFlagSet("loop", flag.ExitOnError)
		url := fs.String("url", "", "nats URL")
		conc := fs.Int("conc", 256, "goroutines")
		n := fs.Int("n", 0, "exit after this many records")
		prof := fs.String("cpuprofile", os.Getenv("LOOP_CPUPROFILE"), "write a CPU profile")
		fs.BoolVar(&sharedShape, "shared", false, "a work stream shaped as jetpool's (see loopShape)")
		_ = fs.Parse(os.Args[2:])
		// The harness stops it with SIGTERM once its last result is stored,
		// maybe after runLoop returned: caught for the whole run, so that the
		// profile is written.
		signal.Notify(make(chan os.Signal, 1), syscall.SIGTERM)
		if *prof != "" {
			f, err := os.Create(*prof)
			if err == nil && pprof.StartCPUProfile(f) == nil {
				defer pprof.StopCPUProfile()
			}
		}
		if err := runLoop(*url, *conc, *n); err != nil {
			fmt.Fprintln(os.Stderr, "loop:", err)
			pprof.StopCPUProfile()
			os.Exit(1)
		}
		return
	}
	var h harness
	flag.StringVar(&h.a, "a", "", "side A: loop, loop:shared (its work stream shaped as jetpool's) or jetpool:BIN:WORKFLOW")
	flag.StringVar(&h.b, "b", "loop", "side B")
	flag.StringVar(&h.in, "in", "", "input JSONL ({\"id\":..,\"text\":..} a line)")
	flag.IntVar(&h.conc, "conc", 256, "concurrency of both sides")
	flag.IntVar(&h.rounds, "rounds", 6, "rounds (the first a warm-up)")
	flag.IntVar(&h.hogs, "hogs", 0, "CPU-bound processes beside both")
	flag.StringVar(&h.server, "server", "nats-server", "nats-server binary")
	flag.StringVar(&h.workerEnv, "worker-env", "", "K=V,... set for jetpool workers alone")
	flag.StringVar(&h.profile, "server-profile", "", "DIR: a CPU profile of the server over each timed process's first -profile-seconds, DIR/SIDE-ROUND.pprof")
	flag.IntVar(&h.profileSecs, "profile-seconds", 3, "length of each -server-profile")
	flag.StringVar(&h.mode, "mode", "work", "work: time the worker against the loop; dispatch: time the enqueue (sides jetpool:BIN:WORKFLOW, natsbench)")
	flag.Parse()
	if h.a == "" || h.in == "" {
		flag.Usage()
		os.Exit(2)
	}
	if err := h.run(); err != nil {
		fmt.Fprintln(os.Stderr, "vsloop:", err)
		os.Exit(1)
	}
}

type harness struct {
	a, b, in, server, workerEnv, mode string
	conc, rounds, hogs                int
	profile                           string // -server-profile
	profileSecs                       int
	round                             int // the round being run, for profile names
	self                              string
	n                                 int
}

// outcome is one timed run.
type outcome struct {
	rate      float64 // records a second from the process's start to the last result
	sustained float64 // records a second from a tenth to nine tenths of the results
	cpu       time.Duration
	serverCPU time.Duration
	maxRSSKB  int64
}

func (h *harness) run() error {
	var err error
	if h.self, err = os.Executable(); err != nil {
		return err
	}
	if h.n, err = countLines(h.in); err != nil {
		return err
	}
	stop := startHogs(h.hogs)
	defer stop()
	fmt.Printf("# %d records, c%d, %d rounds (round 0 a warm-up), %d hogs; load %s\n", h.n, h.conc, h.rounds, h.hogs, loadavg())
	var as, bs []outcome
	for r := range h.rounds {
		order := []string{h.a, h.b}
		if r%2 == 1 {
			order = []string{h.b, h.a}
		}
		got := map[string]outcome{}
		h.round = r
		for _, side := range order {
			once := h.once
			if h.mode == "dispatch" {
				once = h.onceDispatch
			}
			o, err := once(side)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r, side, err)
			}
			got[side] = o
		}
		a, b := got[h.a], got[h.b]
		fmt.Printf("round %d: A %6.0f rec/s (%6.0f) cpu %5.2f+%5.2fs %3d MiB | B %6.0f rec/s (%6.0f) cpu %5.2f+%5.2fs %3d MiB | A/B %.2f  load %s\n",
			r, a.rate, a.sustained, a.cpu.Seconds(), a.serverCPU.Seconds(), a.maxRSSKB>>10,
			b.rate, b.sustained, b.cpu.Seconds(), b.serverCPU.Seconds(), b.maxRSSKB>>10, a.rate/b.rate, loadavg())
		if r > 0 {
			as, bs = append(as, a), append(bs, b)
		}
	}
	summarize(h.a, h.b, as, bs)
	return nil
}

func summarize(an, bn string, as, bs []outcome) {
	if len(as) == 0 {
		return
	}
	var ratios, sratios, ar, br, ac, bc, as2, bs2, am, bm []float64
	for i := range as {
		ratios = append(ratios, as[i].rate/bs[i].rate)
		sratios = append(sratios, as[i].sustained/bs[i].sustained)
		ar, br = append(ar, as[i].rate), append(br, bs[i].rate)
		ac, bc = append(ac, as[i].cpu.Seconds()), append(bc, bs[i].cpu.Seconds())
		as2, bs2 = append(as2, as[i].serverCPU.Seconds()), append(bs2, bs[i].serverCPU.Seconds())
		am, bm = append(am, float64(as[i].maxRSSKB>>10)), append(bm, float64(bs[i].maxRSSKB>>10))
	}
	fmt.Printf("A = %s\nB = %s\n", an, bn)
	fmt.Printf("median rec/s: A %.0f, B %.0f (ratio of medians %.2f)\n", median(ar), median(br), median(ar)/median(br))
	fmt.Printf("A/B per round: median %.2f, min %.2f, max %.2f (%s)\n", median(ratios), minOf(ratios), maxOf(ratios), join(ratios))
	fmt.Printf("A/B sustained (10-90 %%) per round: median %.2f, min %.2f, max %.2f (%s)\n", median(sratios), minOf(sratios), maxOf(sratios), join(sratios))
	fmt.Printf("median CPU (process + server): A %.2f+%.2fs, B %.2f+%.2fs; median peak RSS: A %.0f MiB, B %.0f MiB\n",
		median(ac), median(as2), median(bc), median(bs2), median(am), median(bm))
}

func countLines(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, sc := 0, bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) != "" {
			n++
		}
	}
	return n, sc.Err()
}

// startHogs starts n CPU-bound processes; the func stops them.
func startHogs(n int) func() {
	var cmds []*exec.Cmd
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		if c.Start() == nil {
			cmds = append(cmds, c)
		}
	}
	return func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(v []float64) float64 {
	s := sorted(v)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func minOf(v []float64) float64 { return sorted(v)[0] }
func maxOf(v []float64) float64 { s := sorted(v); return s[len(s)-1] }
func sorted(v []float64) []float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s
}

func join(v []float64) string {
	var b strings.Builder
	for i, x := range v {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%.2f", x)
	}
	return b.String()
}
