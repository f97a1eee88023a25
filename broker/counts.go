package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
)

// Counts are a job's exact result counts, computed by the server.
type Counts struct {
	Total int64 `json:"total"`     // records dispatched
	Done  int64 `json:"done"`      // records with a final result (ok at the last action, failed or cancelled)
	OK    int64 `json:"succeeded"` // records ok at the last action
	// Failed is the records failed at some action; Cancelled those a
	// cancel ended (status cancelled), counted apart: they did not fail,
	// and retry --reason cancelled runs them.
	Failed    int64 `json:"failed"`
	Cancelled int64 `json:"cancelled,omitempty"`
	// ByReason splits Failed and Cancelled by reason (the dead letters').
	ByReason map[string]int64 `json:"failed_by_reason,omitempty"`
}

// JobCounts counts a job's final results. With byReason it also splits
// failures by reason (one server query per reason, only when some failed).
//
// Each figure is one server-side count taken at one instant, so the figures
// must not be derived from each other by subtraction: Failed used to be
// "all results − ok results" from two counts taken at different moments,
// which undercounted (or went negative) while results arrived, and then
// disagreed with ByReason. Failed is now counted directly over every failure
// outcome but cancelled at once, or is the sum of ByReason (but cancelled)
// when that is asked for, so the split always adds up to Failed and
// Cancelled.
//
// OK, Failed and Cancelled are read from the job's three counting
// consumers (see EnsureCounters): O(1) whatever the size of the job.
func (b *Broker) JobCounts(ctx context.Context, j *Job, byReason bool) (Counts, error) {
	c := Counts{Total: j.Total}
	if len(j.Actions) == 0 {
		return c, nil
	}
	n, err := b.counters(ctx, j)
	if err != nil {
		return c, err
	}
	c.OK, c.Failed, c.Cancelled = int64(n[0]), int64(n[1]), int64(n[2])
	if byReason && c.Failed+c.Cancelled > 0 {
		c.Failed, c.Cancelled = 0, 0
		for _, r := range failureOutcomes {
			n, err := b.Count(ctx, StreamResults, ResultFilter(j.ID, "", r))
			if err != nil {
				return c, err
			}
			if n > 0 {
				if c.ByReason == nil {
					c.ByReason = map[string]int64{}
				}
				c.ByReason[r] = int64(n)
				if r == string(retry.ReasonCancelled) {
					c.Cancelled = int64(n)
				} else {
					c.Failed += int64(n)
				}
			}
		}
	}
	c.Done = c.OK + c.Failed + c.Cancelled
	return c, nil
}

// CounterIdle is how long a counting consumer lives without being pulled
// (it never is): the server removes it then, so the consumers of old jobs
// do not pile up on the results stream, and the next count of its job makes
// it again (one walk over the job's results).
const CounterIdle = 24 * time.Hour

// CounterName is the name of a job's counting consumer on the results
// stream: "ok" counts the records ok at the last action, "failed" the
// records failed at any action, "cancelled" those a cancel ended.
func CounterName(job, what string) string { return "jetpool-count-" + job + "-" + what }

// Counters are the kinds of a job's counting consumers (CounterName).
var Counters = []string{"ok", "failed", "cancelled"}

func counterConfigs(j *Job) []jetstream.ConsumerConfig {
	last := j.Actions[len(j.Actions)-1]
	var failed []string
	for _, r := range failureOutcomes {
		if r != string(retry.ReasonCancelled) {
			failed = append(failed, ResultFilter(j.ID, "", r))
		}
	}
	mk := func(what string, filters ...string) jetstream.ConsumerConfig {
		return jetstream.ConsumerConfig{Durable: CounterName(j.ID, what), FilterSubjects: filters,
			Description:       "jetpool: counts results of job " + j.ID + " (" + what + "); never consumed",
			AckPolicy:         jetstream.AckNonePolicy,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			InactiveThreshold: CounterIdle}
	}
	return []jetstream.ConsumerConfig{mk("ok", ResultFilter(j.ID, last, OutcomeOK)), mk("failed", failed...),
		mk("cancelled", ResultFilter(j.ID, "", string(retry.ReasonCancelled)))}
}

// EnsureCounters makes the job's counting consumers on the results
// stream, if missing. They are durable and never consumed: the server keeps
// their pending count up to date as results are stored and replaced (O(1)
// per result), so reading a job's counts is one consumer-info request each,
// not a walk over the job's result subjects. Made by the dispatcher before
// any result exists; made on first use (one walk) for an older job.
func (b *Broker) EnsureCounters(ctx context.Context, j *Job) error {
	_, err := b.counters(ctx, j)
	return err
}

func (b *Broker) counters(ctx context.Context, j *Job) (n [3]uint64, err error) {
	leader := b.leaderView(StreamResults)
	for i, cc := range counterConfigs(j) {
		c, err := b.JS.Consumer(ctx, StreamResults, cc.Durable)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || (err == nil && !sameFilters(c.CachedInfo().Config, cc)) {
			// Missing, or made by a version that knew other failure
			// reasons (a cancelled record would go uncounted, or be
			// counted as failed).
			c, err = b.JS.CreateOrUpdateConsumer(ctx, StreamResults, cc)
		}
		if err != nil {
			return n, fmt.Errorf("count results of job %s: %w", j.ID, err)
		}
		n[i] = c.CachedInfo().NumPending
		if !leader.onCurrentMember(ctx, c.CachedInfo()) {
			// Its leader's copy is behind (a node catching up): counted
			// afresh on the stream's leader instead.
			if n[i], err = b.countOnLeader(ctx, leader, cc.FilterSubjects...); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// sameFilters reports whether a consumer's filters are the ones cc sets
// (a server may keep a single filter as FilterSubject).
func sameFilters(have, cc jetstream.ConsumerConfig) bool {
	h := have.FilterSubjects
	if have.FilterSubject != "" {
		h = append(slices.Clone(h), have.FilterSubject)
	}
	return slices.Equal(slices.Sorted(slices.Values(h)), slices.Sorted(slices.Values(cc.FilterSubjects)))
}

// countFiltered counts the messages of stream matching any of filters at
// one instant: an ephemeral consumer's pending count, computed by the server
// by walking the matching subjects.
//
// The consumer counts on the member it is placed on, which may be behind:
// only the leader's count is taken (broker/current.go).
func (b *Broker) countFiltered(ctx context.Context, stream string, filters ...string) (uint64, error) {
	return b.countOnLeader(ctx, b.leaderView(stream), filters...)
}

func (b *Broker) countOnLeader(ctx context.Context, leader *leaderView, filters ...string) (uint64, error) {
	stream := leader.stream
	for try := 1; try <= placeTries; try++ {
		if err := placePause(ctx, try); err != nil {
			return 0, fmt.Errorf("count %s %v: %w", stream, filters, err)
		}
		c, err := b.JS.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{
			FilterSubjects:    filters,
			AckPolicy:         jetstream.AckNonePolicy,
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			InactiveThreshold: 10 * time.Second,
			MemoryStorage:     true,
			Replicas:          1,
		})
		if err != nil {
			return 0, fmt.Errorf("count %s %v: %w", stream, filters, err)
		}
		info := c.CachedInfo()
		_ = b.JS.DeleteConsumer(context.WithoutCancel(ctx), stream, info.Name)
		if leader.onLeader(ctx, info) {
			return info.NumPending, nil
		}
	}
	return 0, fmt.Errorf("count %s %v: no count could be placed on the stream's leader in %d tries", stream, filters, placeTries)
}

// failureOutcomes are the outcome tokens of failed results: every reason,
// and "failed" for a failure without one (Result.Outcome).
var failureOutcomes = func() []string {
	out := make([]string, 0, len(retry.Reasons)+1)
	for _, r := range retry.Reasons {
		out = append(out, string(r))
	}
	return append(out, "failed")
}()

// Progress is a job's live state: exact result counts and the work
// consumer's backlog.
type Progress struct {
	Counts
	Queued     uint64 // not yet delivered
	AckPending int    // in flight, or waiting for a delayed redelivery
	Paused     bool
}

// Drained reports whether nothing of the job is queued, in flight or waiting.
func (p Progress) Drained() bool { return p.Queued == 0 && p.AckPending == 0 }

// Finished reports whether every record of j has its final result (or j
// failed or was cancelled, and nothing of it is left in flight).
func (p Progress) Finished(j *Job) bool {
	return j.Dispatched && p.Drained() && (p.Done >= j.Total || j.Stopped())
}

// JobProgress reads a job's progress.
func (b *Broker) JobProgress(ctx context.Context, j *Job, byReason bool) (Progress, error) {
	p, err := b.Backlog(ctx, j.ID)
	if err != nil {
		return p, err
	}
	c, err := b.JobCounts(ctx, j, byReason)
	if err != nil {
		return p, err
	}
	p.Counts = c
	return p, nil
}

// Backlog reads only the job consumer's queued and ack-pending counts: one
// cheap request, fit for tight polling (the result counts are not filled in).
// A job without a work consumer has nothing to deliver: its consumer goes
// once it has finished (Sweep), so it reads as drained.
func (b *Broker) Backlog(ctx context.Context, job string) (Progress, error) {
	var p Progress
	cons, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(job))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("job %s: %w", job, err)
	}
	info := cons.CachedInfo()
	p.Queued, p.AckPending, p.Paused = info.NumPending, info.NumAckPending, info.Paused
	return p, nil
}
