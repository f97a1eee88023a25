package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// findNatsCLI is the nats CLI of the raw baselines: p when set, else nats on
// PATH or in $GOPATH/bin, else "" (nats.go's loops instead).
func findNatsCLI(p string) string { return findTool(p, "nats") }

// findTool is p when set, else the named binary on PATH or in
// $GOPATH/bin, else "".
func findTool(p, name string) string {
	if p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if gp, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(gp)), "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

var statsRE = regexp.MustCompile(`stats: ([0-9,]+) msgs/sec`)

// natsBench runs `nats bench js <kind> [<mode>] [subject] …` and returns
// msgs/s. A run that has not finished after natsBenchTimeout is taken for a
// stall of the CLI: it is ended with SIGQUIT (its goroutine dump is kept in
// a file, for the report) and run once more, after reset (if not nil;
// it is called before each run), so one stall does not spoil a long bench,
// and a second fails it instead of hanging.
func natsBench(ctx context.Context, w io.Writer, cli, url string, n int, reset func() error, kind, mode, subject string, args ...string) (float64, error) {
	a := []string{"bench", "js", kind}
	if mode != "" {
		a = append(a, mode)
	}
	if subject != "" {
		a = append(a, subject)
	}
	a = append(a, args...)
	a = append(a, "--no-progress", "-s", url)
	timeout := natsBenchTimeout(n)
	for try := 1; ; try++ {
		if reset != nil {
			if err := reset(); err != nil {
				return 0, err
			}
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		cmd := exec.CommandContext(rctx, cli, a...)
		cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGQUIT) }
		cmd.WaitDelay = 5 * time.Second
		out, err := cmd.CombinedOutput()
		stalled := rctx.Err() != nil && ctx.Err() == nil
		cancel()
		if stalled {
			kept := "not kept: "
			if dump, ferr := os.CreateTemp("", "jetpool-bench-nats-stall-*.txt"); ferr != nil {
				kept += ferr.Error()
			} else {
				_, _ = dump.Write(out)
				_ = dump.Close()
				kept = "in " + dump.Name()
			}
			msg := fmt.Sprintf("%s %s: no result after %s (the CLI stalled; its goroutine dump is %s)", cli, strings.Join(a, " "), timeout, kept)
			if try == 2 {
				return 0, errors.New(msg)
			}
			fmt.Fprintf(w, "   %s; running it again\n", msg)
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("%s %s: %v\n%s", cli, strings.Join(a, " "), err, out)
		}
		m := statsRE.FindSubmatch(out)
		if m == nil {
			return 0, fmt.Errorf("nats bench: no rate in its output:\n%s", out)
		}
		return strconv.ParseFloat(strings.ReplaceAll(string(m[1]), ",", ""), 64)
	}
}

// natsBenchTimeout is how long a `nats bench` run of n messages may take
// before it is taken for a stall: a minute, plus 1 ms a message (100 times
// what the engine needs on a 2-core machine). A variable, for a test.
var natsBenchTimeout = func(n int) time.Duration { return time.Minute + time.Duration(n)*time.Millisecond }

// rawGo is the engine's own speed through nats.go, as jetpool uses it:
// async publish with Nats-Msg-Id, then a pull consumer acking each message,
// on a stream of the given retention.
func rawGo(ctx context.Context, b *broker.Broker, n, size int, retention jetstream.RetentionPolicy) (pub, consume float64, err error) {
	s, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHRAW", Subjects: []string{"benchraw.>"},
		Retention: retention, Storage: jetstream.FileStorage})
	if err != nil {
		return 0, 0, err
	}
	defer b.JS.DeleteStream(context.WithoutCancel(ctx), "BENCHRAW")
	start := time.Now()
	if err := publishRaw(ctx, b, "benchraw.x", "raw-", n, size, nil); err != nil {
		return 0, 0, err
	}
	pub = float64(n) / time.Since(start).Seconds()
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return 0, 0, err
	}
	start = time.Now()
	done := make(chan struct{})
	var got int
	cc, err := c.Consume(func(m jetstream.Msg) {
		_ = m.Ack()
		got++
		if got == n {
			close(done)
		}
	}, rawPullOpts...)
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
	cc.Stop()
	consume = float64(n) / time.Since(start).Seconds()
	return pub, consume, ctx.Err()
}

// pairedPub is the nats.go async publisher's rate on a stream of its own,
// made afresh and deleted after: the dispatch's yardstick.
func pairedPub(ctx context.Context, b *broker.Broker, n, size int) (float64, error) {
	if _, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHPAIRED", Subjects: []string{"benchpaired.>"},
		Storage: jetstream.FileStorage}); err != nil {
		return 0, err
	}
	defer b.JS.DeleteStream(context.WithoutCancel(ctx), "BENCHPAIRED")
	start := time.Now()
	if err := publishRaw(ctx, b, "benchpaired.x", "paired-", n, size, nil); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// publishRaw publishes n messages of size bytes to subject, async with a
// Nats-Msg-Id, waiting for the acks every 500 (nats bench's window); work,
// when set, gives message i instead (on subject).
func publishRaw(ctx context.Context, b *broker.Broker, subject, idPrefix string, n, size int, work func(subject string, i int) (*nats.Msg, error)) error {
	payload := make([]byte, size)
	wait := func() error {
		select {
		case <-b.JS.PublishAsyncComplete():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i := 0; i < n; i++ {
		var m *nats.Msg
		if work != nil {
			var err error
			if m, err = work(subject, i); err != nil {
				return err
			}
		} else {
			m = nats.NewMsg(subject)
			m.Data = payload
			m.Header.Set(nats.MsgIdHdr, idPrefix+strconv.Itoa(i))
		}
		if _, err := b.JS.PublishMsgAsync(m); err != nil {
			return err
		}
		if i%500 == 499 {
			if err := wait(); err != nil {
				return err
			}
		}
	}
	return wait()
}

// rawPullOpts are the raw consume loops' pull settings: 500 messages a
// pull, renewed every 2 s (a pull of nats.go's Consume stalled rarely, until
// its default 30 s expiry).
var rawPullOpts = []jetstream.PullConsumeOpt{jetstream.PullMaxMessages(500), jetstream.PullExpiry(2 * time.Second)}

// rawFloor is what jetpool's work path stores per record, done with bare
// nats.go: pull from a work-queue stream (an ack removes the message), publish
// a small result to a stream of one message per subject and wait for its
// ack, then ack the work message. `nats bench js consume` does none of the
// storage writes (its stream keeps the messages; nothing is published).
//
// With inline set, the messages are work envelopes and each result is what
// jetpool computes for a record (inlineWork), on nats.go's consume goroutine.
func rawFloor(ctx context.Context, w io.Writer, s *server, n, size int, inline *inlineWork) (float64, cpuUse, error) {
	fl := &floor{b: s.b, inline: inline, which: "floor", queue: make(chan floorPending, 4096)}
	if inline != nil {
		fl.which = "inline"
	}
	c, err := fl.streams(ctx, n, size)
	defer fl.cleanup(ctx)
	if err != nil {
		return 0, cpuUse{}, err
	}
	start, cpu := time.Now(), s.meter()
	cc, err := c.Consume(func(m jetstream.Msg) { fl.handle(ctx, m) }, rawPullOpts...)
	if err != nil {
		return 0, cpuUse{}, err
	}
	defer cc.Stop()
	if err := fl.ackStored(ctx, w, n); err != nil {
		return 0, cpuUse{}, err
	}
	return float64(n) / time.Since(start).Seconds(), cpu(n), nil
}

// floor is one raw floor (or inline) run: its consume callback publishes a
// result for each work message and queues the pair; ackStored acks each
// message once its result is stored.
type floor struct {
	b      *broker.Broker
	inline *inlineWork
	which  string // "floor" or "inline", for its reports
	queue  chan floorPending
	seq    int          // results published, on the consume goroutine
	lost   atomic.Int64 // results whose publish failed: their messages wait for AckWait
	made   []string     // the streams it made, deleted by cleanup
}

// floorPending is a work message and its result's publish.
type floorPending struct {
	msg jetstream.Msg
	f   jetstream.PubAckFuture
}

// floorResult is the raw floor's result: a small result, as jetpool's.
var floorResult = []byte(`{"id":"r","status":"ok","output":"ok","attempts":1,"usage":{"input_tokens":10,"output_tokens":2}}`)

// streams makes the work-queue stream, fills it with n messages (work
// envelopes when inline) and makes the results stream and the consumer.
func (fl *floor) streams(ctx context.Context, n, size int) (jetstream.Consumer, error) {
	work, err := fl.b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHWQ", Subjects: []string{"benchwq.>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, err
	}
	fl.made = append(fl.made, "BENCHWQ")
	if _, err := fl.b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHRES", Subjects: []string{"benchres.>"},
		MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage}); err != nil {
		return nil, err
	}
	fl.made = append(fl.made, "BENCHRES")
	var msgs func(string, int) (*nats.Msg, error)
	if fl.inline != nil {
		msgs = fl.inline.message(size)
	}
	if err := publishRaw(ctx, fl.b, "benchwq.x", "wq-", n, size, msgs); err != nil {
		return nil, err
	}
	return work.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000})
}

// cleanup deletes the streams the run made, in the reverse order.
func (fl *floor) cleanup(ctx context.Context) {
	for i := len(fl.made) - 1; i >= 0; i-- {
		_ = fl.b.JS.DeleteStream(context.WithoutCancel(ctx), fl.made[i])
	}
}

// handle is the consume callback: it publishes m's result and queues the
// pair for ackStored.
func (fl *floor) handle(ctx context.Context, m jetstream.Msg) {
	fl.seq++
	r := &nats.Msg{Subject: fl.inline.resultSubject(m, func() string { return "benchres.r" + strconv.Itoa(fl.seq) })}
	var ok bool
	if r.Data, ok = fl.inline.body(ctx, m.Data()); !ok {
		fl.lost.Add(1)
		return
	}
	for {
		f, err := fl.b.JS.PublishMsgAsync(r)
		switch {
		case err == nil:
			fl.queue <- floorPending{m, f}
			return
		case errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil:
			continue // the store is behind: wait for room
		default:
			fl.lost.Add(1)
			return // not acked: redelivered after AckWait, and the stall is reported
		}
	}
}

// ackStored acks n work messages, each once its result is stored. A second
// without progress is reported (so that a figure it spoils is not taken for
// the engine's), and a minute of them fails the run.
func (fl *floor) ackStored(ctx context.Context, w io.Writer, n int) error {
	stalled := time.Duration(0)
	for i := 0; i < n; i++ {
		select {
		case p := <-fl.queue:
			stalled = 0
			select {
			case <-p.f.Ok():
				_ = p.msg.Ack()
			case err := <-p.f.Err():
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
			if err := fl.inline.failure(); err != nil {
				return fmt.Errorf("raw %s: %w", fl.which, err)
			}
			if stalled += time.Second; stalled >= time.Minute {
				return fmt.Errorf("raw %s: stalled after %d of %d messages", fl.which, i, n)
			}
			fmt.Fprintf(w, "   raw %s: no progress for %s at %d of %d messages (%d results not published)\n", fl.which, stalled, i, n, fl.lost.Load())
			i--
		}
	}
	return nil
}

// inlineWork is jetpool's own work on a record, as a worker does it, minus
// its machinery (handler goroutines, slots, the retry session, limits,
// heartbeats, the committer): decode the envelope, render the prompt from
// the fields it names, call the model, encode the result.
type inlineWork struct {
	a      *workflow.Action
	pr     provider.Provider
	failed atomic.Pointer[error]
	// whole: each result is the one jetpool stores for a record answered at
	// its first try (its recovery, its action's account and the totals,
	// the finish reason, the latency, the line, the revision, the record's
	// sum), not only the answer and its usage: the same bytes to the store.
	whole bool
}

func newInlineWork(wf *workflow.Workflow) (*inlineWork, error) {
	a := wf.Actions[0]
	pr, err := provider.New(wf.Providers[a.Provider])
	if err != nil {
		return nil, err
	}
	return &inlineWork{a: a, pr: pr}, nil
}

// message gives the work message of record i on subject, as a dispatch
// publishes it: the envelope, and the headers of a first run.
func (iw *inlineWork) message(size int) func(subject string, i int) (*nats.Msg, error) {
	pad := strings.Repeat("x", max(size-40, 1))
	return func(subject string, i int) (*nats.Msg, error) {
		id := "r" + strconv.Itoa(i)
		raw := json.RawMessage(`{"id":"` + id + `","text":"` + pad + `"}`)
		env := &broker.Envelope{ID: id, RawRecord: raw, Line: i + 1, Sum: broker.RecordSum(raw)}
		m, err := broker.NewDispatchMsg(inlineJob, inlineAction, env, 0)
		if err != nil {
			return nil, err
		}
		m.Subject = subject
		m.Header.Set(broker.HeaderFirstRun, "1")
		return m, nil
	}
}

// inlineJob and inlineAction name the raw rows' work as a dispatcher would:
// their messages carry a dispatched record's headers (record, first run,
// nonce; no message id: a new job is published under its dispatch's
// lease), which the server stores and delivers and nats.go decodes, and
// each result goes to the subject a worker would give it.
var inlineJob, inlineAction = &broker.Job{ID: "bench-0123456789ab", Nonce: "4f9c2a7d1e3b5a60", Lease: time.Unix(1, 0)}, "act"

// resultSubject is the subject of the result of work message m: jetpool's
// shape (broker.ResultSubject) under the raw results stream when iw does
// jetpool's work, else fallback's (made only then: it reads m's metadata).
func (iw *inlineWork) resultSubject(m jetstream.Msg, fallback func() string) string {
	if iw == nil {
		return fallback()
	}
	return "benchres." + inlineJob.ID + "." + inlineAction + ".ok." + broker.RecordToken(m.Headers().Get(broker.HeaderRecord))
}

// body is the result a raw run publishes for the work message data: the
// fixed floorResult when iw is nil, else jetpool's result for the record;
// false when that failed (the first failure is kept for failure).
func (iw *inlineWork) body(ctx context.Context, data []byte) ([]byte, bool) {
	if iw == nil {
		return floorResult, true
	}
	out, err := iw.result(ctx, data)
	if err != nil {
		iw.failed.CompareAndSwap(nil, &err)
		return nil, false
	}
	return out, true
}

// failure is the first error of iw's work (nil when iw is nil or none).
func (iw *inlineWork) failure() error {
	if iw == nil {
		return nil
	}
	if err := iw.failed.Load(); err != nil {
		return *err
	}
	return nil
}

func (iw *inlineWork) result(ctx context.Context, data []byte) ([]byte, error) {
	env, err := broker.ParseEnvelope(data)
	if err != nil {
		return nil, err
	}
	rec, err := env.Fields(iw.a.Fields())
	if err != nil {
		return nil, err
	}
	prompt, err := iw.a.Render(rec)
	if err != nil {
		return nil, err
	}
	resp, err := iw.pr.Call(ctx, provider.Request{Model: iw.a.Model, System: iw.a.System,
		Messages: []provider.Message{{Role: "user", Content: prompt}}, RecordID: env.ID})
	if err != nil {
		return nil, err
	}
	r := &broker.Result{ID: env.ID, Status: broker.StatusOK, Output: resp.Text, Action: iw.a.Name, Job: "inline",
		Provider: iw.a.Provider, Model: resp.Model, Finished: time.Now().UTC(),
		Usage: broker.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}}
	if iw.whole {
		acct := broker.Account{Action: iw.a.Name, Revision: 1, Status: broker.StatusOK, Attempts: 1, Calls: 1, Deliveries: 1,
			Usage: r.Usage, LatencyMS: resp.Latency.Milliseconds()}
		t := broker.Sum([]broker.Account{acct})
		r.Job, r.Recovery, r.Actions, r.Totals = inlineJob.ID, broker.Recovery{Attempts: 1, Deliveries: 1}, []broker.Account{acct}, &t
		r.FinishReason, r.FinishReasonRaw = resp.FinishReason, resp.FinishReasonRaw
		r.LatencyMS, r.Line, r.Revision, r.RecordSum = float64(resp.Latency.Microseconds())/1000, env.Line, 1, env.Sum
	}
	return json.Marshal(r)
}

// rawLoop is the plain nats.go program a user would write for jetpool's
// storage work, at the pool's concurrency: conc goroutines, each taking a
// work message from a work-queue stream (one Consume feeds them), publishing
// its result and waiting for the store's ack (js.PublishMsg), then acking
// the work message. With iw nil it does no work on the record (the
// bare loop's row); with iw set the messages are work envelopes and each
// goroutine does jetpool's own work on its record first (inlineWork: the
// envelope, the prompt, the call, the result's JSON), the same program
// doing the same work as jetpool minus its machinery. began, when set, is
// called as the timing starts (the streams filled).
func rawLoop(ctx context.Context, s *server, n, size, conc int, iw *inlineWork, began func()) (float64, cpuUse, error) {
	fl := &floor{b: s.b, which: "loop", inline: iw}
	if iw != nil {
		fl.which = "loop with the record work"
	}
	c, err := fl.streams(ctx, n, size)
	defer fl.cleanup(ctx)
	if err != nil {
		return 0, cpuUse{}, err
	}
	msgs := make(chan jetstream.Msg, conc)
	var done, failed atomic.Int64
	finished := make(chan struct{})
	var wg sync.WaitGroup
	if began != nil {
		began()
	}
	start, cpu := time.Now(), s.meter()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				r := &nats.Msg{Subject: iw.resultSubject(m, func() string { return "benchres.l" + strconv.Itoa(w) + "-" + strconv.FormatUint(seqOf(m), 10) })}
				var ok bool
				if r.Data, ok = iw.body(ctx, m.Data()); !ok {
					failed.Add(1)
					continue
				}
				if _, err := s.b.JS.PublishMsg(ctx, r); err != nil {
					failed.Add(1) // not acked: redelivered after AckWait
					continue
				}
				_ = m.Ack()
				if done.Add(1) == int64(n) {
					close(finished)
				}
			}
		}()
	}
	cc, err := c.Consume(func(m jetstream.Msg) { msgs <- m }, rawPullOpts...)
	if err != nil {
		close(msgs)
		wg.Wait()
		return 0, cpuUse{}, err
	}
	defer func() { cc.Stop(); close(msgs); wg.Wait() }()
	last, stalled := int64(0), time.Duration(0)
	for {
		select {
		case <-finished:
			return float64(n) / time.Since(start).Seconds(), cpu(n), nil
		case <-ctx.Done():
			return 0, cpuUse{}, ctx.Err()
		case <-time.After(time.Second):
			if d := done.Load(); d != last {
				last, stalled = d, 0
				continue
			}
			if err := iw.failure(); err != nil {
				return 0, cpuUse{}, fmt.Errorf("raw %s: %w", fl.which, err)
			}
			if stalled += time.Second; stalled >= time.Minute {
				return 0, cpuUse{}, fmt.Errorf("raw %s: stalled after %d of %d messages (%d results not stored)", fl.which, last, n, failed.Load())
			}
		}
	}
}

// seqOf is a work message's stream sequence (0 when unknown).
func seqOf(m jetstream.Msg) uint64 {
	if md, err := m.Metadata(); err == nil {
		return md.Sequence.Stream
	}
	return 0
}
