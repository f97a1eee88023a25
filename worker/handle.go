package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// delivery is one work message being handled.
type delivery struct {
	msg     jetstream.Msg
	job     string
	action  *workflow.Action
	index   int
	env     *broker.Envelope
	replays int
	n       int // JetStream delivery count
	mode    string
	prior   []retry.Attempt // attempts of earlier deliveries
	// firstRun: the publisher knew no result of this action could exist
	// for the record yet (broker.HeaderFirstRun), and the job's consumer is
	// not replicated (jobRunner.replicated).
	firstRun bool
}

// unpaid reports whether this is the first delivery of a first-run message:
// the one run of the action for the record, so no result can exist yet.
func (d *delivery) unpaid() bool { return d.firstRun && d.n == 1 }

// handle works one delivery. release hands the delivery's slot on to the
// next record; it is called once the model calls are over and the result
// is on its way to the store (else when handle returns). handedOver: the
// record went to the pool's committer, which acks it once its result is
// stored (Pool.commitLoop).
func (jr *jobRunner) handle(ctx context.Context, msg jetstream.Msg, release func()) (handedOver bool) {
	p := jr.p
	p.handled.Add(1)
	p.cfg.Metrics.Delivery(jr.id)
	d, err := jr.parse(msg)
	if err != nil {
		jr.deadLetterBroken(ctx, msg, err)
		return
	}
	if p.cfg.DieOn != nil && p.cfg.DieOn(d.job, d.action.Name, d.env.ID) {
		return // as if the process died: no ack, no nak
	}
	log := func() *zerolog.Logger { return jr.logFor(d) } // built only when something is logged

	if j := jr.current(); j.Status == broker.JobFailed {
		final := &retry.Error{Class: retry.ClassUnknown, TypeName: "JobFailed", Message: "the job failed before this record ran: " + j.Reason}
		jr.finishFailed(ctx, d, final, nil, retry.ReasonJobFailed, "job failed: "+j.Reason, 0, provider.Usage{})
		return
	}
	// A redelivery after a crash, or a duplicate, must not pay twice. Only
	// the first delivery of a message whose publisher knew that no result
	// can exist yet (broker.HeaderFirstRun) skips the lookup.
	if d.unpaid() {
		// nothing to look up
	} else if ok, err := p.b.HasOK(ctx, d.job, d.action.Name, d.env.ID); err != nil {
		log().Warn().Err(err).Msg("result lookup failed; handing the record back")
		_ = msg.NakWithDelay(time.Second)
		return
	} else if ok != nil {
		if err := jr.forward(ctx, d, ok.Output); err != nil {
			log().Warn().Err(err).Msg("forward to next action failed; handing back")
			_ = msg.NakWithDelay(time.Second)
			return
		}
		_ = msg.Ack()
		return
	}
	if d.action.Mode == workflow.ModeBatch && d.mode != workflow.ModeOnline {
		jr.enqueueBatch(ctx, d) // worker/batch.go
		return
	}
	if d.n > 1 || d.mode == workflow.ModeOnline {
		// A redelivery, or a batch's straggler sent online (its rounds).
		d.prior = jr.loadAttempts(ctx, d)
	}

	// Heartbeats keep a long call's delivery alive (AckWait).
	stopHB := heartbeat(msg, jr.heartbeatEvery())
	run := jr.runSession(ctx, d)
	stopHB()

	out := run.outcome
	pol := d.action.Retry
	dec := pol.Decide(out, d.n)
	if run.reason != "" && !out.Canceled {
		// The session ended the record itself (max_calls).
		dec = retry.Decision{Verdict: retry.VerdictDeadLetter, Reason: run.reason}
	}
	all := append(append([]retry.Attempt(nil), d.prior...), out.Attempts...)
	switch dec.Verdict {
	case retry.VerdictDone:
		res := jr.result(d, run, all)
		if err := jr.forward(ctx, d, run.output); err != nil {
			log().Warn().Err(err).Msg("forward to next action failed; will redeliver")
			_ = msg.NakWithDelay(time.Second)
			return
		}
		// The slot goes to the next record while the result is stored
		// (at most Concurrency results wait so), and the handler to the
		// next task: the pool's committer acks the record once the store
		// has acked its result, so an acked record always has its result.
		held := false
		select {
		case p.writes <- struct{}{}:
			held = true
		case <-ctx.Done():
		}
		f, err := p.b.PublishResult(res)
		if err != nil {
			if held {
				<-p.writes
			}
			jr.unstored(d, err)
			return
		}
		release()
		c := committing{jr: jr, d: d, f: f}
		if !held {
			// Stopping past the deadline: no room is waited for.
			jr.commit(ctx, c)
			return
		}
		jr.storing.Add(1)
		p.commits <- c // never blocks: it has room for every writes token
		return true
	case retry.VerdictRedeliver:
		if out.Canceled {
			// Shutting down: hand it back at once, attempts kept.
			jr.saveAttempts(context.WithoutCancel(ctx), d, all)
			_ = msg.Nak()
			return
		}
		jr.saveAttempts(ctx, d, all)
		log().Debug().Str("class", string(out.Err.Class)).Dur("delay", dec.Delay).Msg("exec layer: redeliver")
		_ = msg.NakWithDelay(dec.Delay)
	case retry.VerdictDeadLetter:
		diag := run.diag
		if run.explain != nil {
			diag = run.explain(all)
		}
		if diag == "" {
			diag = retry.Diagnose(out.Err, all, d.n)
		}
		jr.finishFailed(ctx, d, out.Err, all, dec.Reason, diag, run.calls, run.usage)
	}
	return
}

// committing is a record whose result is on its way to the store.
type committing struct {
	jr *jobRunner
	d  *delivery
	f  jetstream.PubAckFuture
}

// commit acks c's record once the store has acked its result, or hands it
// back when the result was not stored.
func (jr *jobRunner) commit(ctx context.Context, c committing) {
	d := c.d
	if err := broker.AwaitResult(ctx, c.f); err != nil {
		jr.unstored(d, err)
		return
	}
	_ = d.msg.Ack()
	if len(d.prior) > 0 {
		jr.clearAttempts(ctx, d)
	}
	jr.p.cfg.Metrics.Record(d.job, d.action.Name, broker.StatusOK, "")
}

// unstored hands d back when its result was not stored: it is run again.
func (jr *jobRunner) unstored(d *delivery, err error) {
	jr.logFor(d).Warn().Err(err).Msg("result write failed; will redeliver")
	_ = d.msg.NakWithDelay(time.Second)
}

// logFor is the pool's logger with d's job, action, record and delivery.
func (jr *jobRunner) logFor(d *delivery) *zerolog.Logger {
	l := jr.p.log.With().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Int("delivery", d.n).Logger()
	return &l
}

func (jr *jobRunner) parse(msg jetstream.Msg) (*delivery, error) {
	action, ok := strings.CutPrefix(msg.Subject(), jr.workPrefix)
	if !ok || action == "" || strings.IndexByte(action, '.') >= 0 {
		return nil, fmt.Errorf("unexpected subject %s", msg.Subject())
	}
	a, idx := jr.wf.Action(action)
	if a == nil {
		return nil, fmt.Errorf("the workflow has no action %q", action)
	}
	env, err := broker.ParseEnvelope(msg.Data())
	if err != nil {
		return nil, fmt.Errorf("malformed work message: %w", err)
	}
	if env.ID == "" {
		return nil, fmt.Errorf("work message without a record id")
	}
	meta, err := msg.Metadata()
	if err != nil {
		return nil, err
	}
	d := &delivery{msg: msg, job: jr.id, action: a, index: idx, env: env, n: int(meta.NumDelivered)}
	h := msg.Headers()
	d.replays, _ = strconv.Atoi(h.Get(broker.HeaderReplays))
	d.mode = h.Get(broker.HeaderMode)
	d.firstRun = h.Get(broker.HeaderFirstRun) == "1" && d.replays == 0 && !jr.replicated.Load()
	return d, nil
}

// heartbeat sends InProgress for msg every interval until the returned func
// is called; once it returns, no more are sent. One timer, no goroutine.
func heartbeat(msg jetstream.Msg, every time.Duration) (stop func()) {
	var mu sync.Mutex
	stopped := false
	var t *time.Timer
	mu.Lock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		_ = msg.InProgress()
		t.Reset(every)
	})
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		t.Stop()
		mu.Unlock()
	}
}

// deadLetterBroken handles a work message the worker cannot even read.
func (jr *jobRunner) deadLetterBroken(ctx context.Context, msg jetstream.Msg, cause error) {
	parts := broker.SubjectParts(msg.Subject())
	action := "unknown"
	if len(parts) >= 2 {
		action = parts[1]
	}
	rec := msg.Headers().Get(broker.HeaderRecord)
	if rec == "" {
		rec = "unknown"
	}
	e := &deadletter.Entry{Job: jr.id, Record: rec, Action: action, Reason: retry.ReasonProgrammingError,
		Class: retry.ClassProgramming, Error: "failed permanently: ProgrammingError: " + cause.Error(), Data: msg.Data()}
	if err := deadletter.Publish(ctx, jr.p.b, e); err != nil {
		jr.p.log.Error().Err(err).Msg("dead-letter failed; the message stays for redelivery")
		_ = msg.NakWithDelay(5 * time.Second)
		return
	}
	_ = msg.Ack()
}

// forward publishes the record to the next action, with this action's output.
func (jr *jobRunner) forward(ctx context.Context, d *delivery, output any) error {
	if d.index+1 >= len(jr.wf.Actions) {
		return nil
	}
	next := jr.wf.Actions[d.index+1]
	env := &broker.Envelope{ID: d.env.ID, Record: d.env.Record, RawRecord: d.env.RawRecord, Line: d.env.Line, Outputs: map[string]any{}}
	for k, v := range d.env.Outputs {
		env.Outputs[k] = v
	}
	env.Outputs[d.action.Name] = output
	m, err := broker.NewWorkMsg(d.job, next.Name, env, d.replays)
	if err != nil {
		return err
	}
	if d.unpaid() {
		// The one run of this action for the record: this is the one
		// publish of the next action's message.
		m.Header.Set(broker.HeaderFirstRun, "1")
	}
	_, err = jr.p.b.JS.PublishMsg(ctx, m)
	return err
}

func (jr *jobRunner) result(d *delivery, run *sessionRun, all []retry.Attempt) *broker.Result {
	r := &broker.Result{
		ID: d.env.ID, Status: broker.StatusOK, Output: run.output, Action: d.action.Name, Job: d.job,
		Outputs: d.env.Outputs, Provider: d.action.Provider, Model: run.model, Replays: d.replays,
		Usage:    broker.Usage{InputTokens: run.usage.InputTokens, OutputTokens: run.usage.OutputTokens},
		Finished: time.Now().UTC(),
	}
	r.Recovery = recovery(all, run.calls+priorCalls(d.prior), d.n, run.repairs)
	return r
}

// priorCalls is the attempts spent in earlier deliveries. A 429 absorbed
// by the shared limiter is listed among the failures but spends no attempt.
func priorCalls(prior []retry.Attempt) int {
	n := 0
	for _, a := range prior {
		if !a.Absorbed {
			n++
		}
	}
	return n
}

func recovery(all []retry.Attempt, calls, deliveries, repairs int) broker.Recovery {
	rec := broker.Recovery{Attempts: calls, Deliveries: deliveries, Repairs: repairs}
	seen := map[retry.Class]bool{}
	for _, a := range all {
		rec.Failures = append(rec.Failures, broker.Failure{N: a.N, Delivery: a.Delivery, Class: string(a.Class), Error: a.Error, Absorbed: a.Absorbed,
			Repair: a.Class == retry.ClassSchemaViolation})
		if a.Class != "" && !seen[a.Class] {
			seen[a.Class] = true
			rec.Classes = append(rec.Classes, string(a.Class))
		}
	}
	return rec
}

// finishFailed dead-letters the record, writes its failed result, and only
// then acks the work message. If the dead letter cannot be published the
// message is not acked: it will be redelivered, never lost.
func (jr *jobRunner) finishFailed(ctx context.Context, d *delivery, final *retry.Error, all []retry.Attempt,
	reason retry.Reason, diag string, calls int, usage provider.Usage) {
	p := jr.p
	if final == nil {
		final = &retry.Error{Class: retry.ClassUnknown}
	}
	totalCalls := calls + priorCalls(d.prior)
	e := &deadletter.Entry{
		Job: d.job, Record: d.env.ID, Action: d.action.Name, Reason: reason, Class: final.Class, Error: diag,
		Attempts: totalCalls, Deliveries: d.n, Provider: d.action.Provider, Model: cmp.Or(final.Model, d.action.Model),
		Replays: d.replays, Data: d.msg.Data(), FailedAt: time.Now().UTC(),
	}
	if err := deadletter.Publish(ctx, p.b, e); err != nil {
		p.log.Error().Err(err).Str("record", d.env.ID).Msg("dead-letter publish failed; record stays for redelivery")
		_ = d.msg.NakWithDelay(2 * time.Second)
		return
	}
	res := &broker.Result{
		ID: d.env.ID, Status: broker.StatusFailed, Reason: string(reason), Action: d.action.Name, Job: d.job,
		Error:   &broker.ResultError{Class: string(final.Class), Retryable: final.Class.Transient() || final.Class == retry.ClassUnknown, Message: diag},
		Outputs: d.env.Outputs, Provider: d.action.Provider, Model: e.Model, Replays: d.replays,
		Usage:    broker.Usage{InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens},
		Recovery: recovery(all, totalCalls, d.n, repairsOf(all, true)), Finished: e.FailedAt,
	}
	if err := p.b.WriteResult(ctx, res); err != nil {
		p.log.Error().Err(err).Str("record", d.env.ID).Msg("result write failed; record stays for redelivery")
		_ = d.msg.NakWithDelay(2 * time.Second)
		return
	}
	_ = d.msg.Ack()
	if len(d.prior) > 0 {
		jr.clearAttempts(ctx, d)
	}
	p.cfg.Metrics.Record(d.job, d.action.Name, string(reason), final.Class)
	p.log.Info().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Str("reason", string(reason)).
		Msg(diag)
	if reason != retry.ReasonJobFailed && reason != retry.ReasonBadInput && exhaustedPolicy(d.action, reason, final) == retry.Raise {
		jr.raise(ctx, d, diag)
	}
}

// raise fails the job: workers stop running its records; what is queued is
// dead-lettered with reason job_failed (replayable with `jetpool retry`).
func (jr *jobRunner) raise(ctx context.Context, d *delivery, diag string) {
	j, err := jr.p.b.UpdateJob(ctx, d.job, func(j *broker.Job) bool {
		if j.Status == broker.JobFailed {
			return false
		}
		j.Status = broker.JobFailed
		j.Reason = fmt.Sprintf("action %s, record %s: %s", d.action.Name, d.env.ID, diag)
		return true
	})
	if err != nil {
		jr.p.log.Error().Err(err).Msg("could not mark the job failed")
		return
	}
	jr.setJob(j)
}

func attemptsKey(d *delivery) string {
	return d.job + "." + d.action.Name + "." + broker.RecordToken(d.env.ID)
}

func (jr *jobRunner) loadAttempts(ctx context.Context, d *delivery) []retry.Attempt {
	kv, err := jr.p.b.KV(ctx, broker.BucketAttempts)
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, attemptsKey(d))
	if err != nil {
		return nil
	}
	var st struct {
		Replays  int             `json:"replays"`
		Attempts []retry.Attempt `json:"attempts"`
	}
	if json.Unmarshal(e.Value(), &st) != nil || st.Replays != d.replays {
		return nil
	}
	return st.Attempts
}

func (jr *jobRunner) saveAttempts(ctx context.Context, d *delivery, all []retry.Attempt) {
	if err := jr.putAttempts(ctx, d, all); err != nil {
		jr.p.log.Debug().Err(err).Msg("attempts not saved; diagnostics of the next delivery will lack them")
	}
}

// putAttempts stores the record's attempts so far for its next delivery.
func (jr *jobRunner) putAttempts(ctx context.Context, d *delivery, all []retry.Attempt) error {
	kv, err := jr.p.b.KV(ctx, broker.BucketAttempts)
	if err != nil {
		return err
	}
	data, _ := json.Marshal(map[string]any{"replays": d.replays, "attempts": all})
	_, err = kv.Put(ctx, attemptsKey(d), data)
	return err
}

func (jr *jobRunner) clearAttempts(ctx context.Context, d *delivery) {
	if kv, err := jr.p.b.KV(ctx, broker.BucketAttempts); err == nil {
		_ = kv.Purge(ctx, attemptsKey(d))
	}
}
