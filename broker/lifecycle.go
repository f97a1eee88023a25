package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Lifecycle defaults of Config (docs/operations.md "Retention").
const (
	// JobRetentionDefault is how long a finished job is kept: long enough
	// to export its results and replay its dead letters after a holiday.
	JobRetentionDefault = 30 * 24 * time.Hour
	// ConsumerGraceDefault is how long a finished job keeps its work
	// consumer: `nats consumer info` still shows the job for a while, and
	// a replay soon after is not slowed by making it again.
	ConsumerGraceDefault = time.Hour
	// CompressionDefault is none. S2 on the results and DLQ streams halves
	// their disk (docs/operations.md has the figures), but nats-server
	// 2.15.2 can leave an S2 block it cannot read after a SIGKILL (a node
	// restarted in TestChaosLeaderLoss logged "error reading compression
	// reader: s2: corrupt input" and never caught up; the stream's leader
	// could not load the dead letters in it): a paid answer is worth more
	// than the disk. JETPOOL_COMPRESSION=s2 turns it on.
	CompressionDefault = "none"
)

// ByteSize is a size in bytes read from the environment: digits, or digits
// with a unit (KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB in
// powers of 1024); -1 means no limit.
type ByteSize int64

// Decode implements envconfig.Decoder.
func (s *ByteSize) Decode(v string) error {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" {
		*s = 0
		return nil
	}
	if v == "-1" {
		*s = -1
		return nil
	}
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q is not a size such as 500MiB, 20GB or -1 (no limit)", v)
	}
	*s = ByteSize(n * mult)
	return nil
}

func (c Config) validateLifecycle() error {
	if c.JobRetention < 0 {
		return fmt.Errorf("JETPOOL_JOB_RETENTION: %s is negative (0 keeps finished jobs)", c.JobRetention)
	}
	if c.ConsumerGrace < 0 {
		return fmt.Errorf("JETPOOL_CONSUMER_GRACE: %s is negative", c.ConsumerGrace)
	}
	for name, v := range map[string]ByteSize{"JETPOOL_RESULTS_MAX_BYTES": c.ResultsMaxBytes, "JETPOOL_DLQ_MAX_BYTES": c.DLQMaxBytes} {
		if v < -1 {
			return fmt.Errorf("%s: %d is not a size (-1: no limit)", name, v)
		}
	}
	if _, err := c.compression(); err != nil {
		return err
	}
	return nil
}

// compression is the store compression of the results and DLQ streams.
func (c Config) compression() (jetstream.StoreCompression, error) {
	switch strings.ToLower(strings.TrimSpace(c.Compression)) {
	case "", CompressionDefault:
		return jetstream.NoCompression, nil
	case "s2":
		return jetstream.S2Compression, nil
	}
	return 0, fmt.Errorf("JETPOOL_COMPRESSION: %q is not s2 or none", c.Compression)
}

// JobBacklog is the state of one job's work consumer.
type JobBacklog struct {
	Job        string
	Queued     uint64 // not yet delivered
	AckPending int    // delivered, not acked: in flight, or waiting for a delayed redelivery
	Paused     bool
}

// Backlogs reads the work consumer of every job that has one: a single
// paged request (the server answers 256 consumers a page), whatever the
// size of the jobs. A finished job's consumer is removed after
// Config.ConsumerGrace (Sweep), so the list is of running jobs and jobs
// that finished recently.
func (b *Broker) Backlogs(ctx context.Context) ([]JobBacklog, error) {
	s, err := b.stream(ctx, StreamWork)
	if err != nil {
		return nil, err
	}
	l := s.ListConsumers(ctx)
	var out []JobBacklog
	for info := range l.Info() {
		job := info.Config.Metadata["jetpool.job"]
		if job == "" || info.Name != ConsumerName(job) {
			continue // not a consumer jetpool made
		}
		out = append(out, JobBacklog{Job: job, Queued: info.NumPending, AckPending: info.NumAckPending, Paused: info.Paused})
	}
	if err := l.Err(); err != nil {
		return nil, fmt.Errorf("list the consumers of %s: %w", StreamWork, err)
	}
	return out, nil
}

// DeadLetterCounts counts the dead letters of every job, and in all: one
// stream-info request with the DLQ's subjects (one per job and action).
func (b *Broker) DeadLetterCounts(ctx context.Context) (byJob map[string]uint64, total uint64, err error) {
	s, err := b.stream(ctx, StreamDLQ)
	if err != nil {
		return nil, 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(DLQFilter("", "")))
	if err != nil {
		return nil, 0, fmt.Errorf("count dead letters: %w", err)
	}
	byJob = map[string]uint64{}
	for subj, n := range info.State.Subjects {
		if parts := SubjectParts(subj); len(parts) == 2 {
			byJob[parts[0]] += n
		}
	}
	return byJob, info.State.Msgs, nil
}

// RestoreConsumer makes the job's work consumer again when it is missing
// (removed by Sweep after the job finished): a replay into a finished job
// calls it once it has reopened the job.
func (b *Broker) RestoreConsumer(ctx context.Context, j *Job) error {
	_, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(j.ID))
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		_, err = b.EnsureConsumer(ctx, j.ID, j.MaxDeliver)
	}
	return err
}

// DeleteReport says what DeleteJob removed.
type DeleteReport struct {
	Job        string `json:"job"`
	Work       uint64 `json:"work"`         // queued work messages
	Results    uint64 `json:"results"`      // results of every action
	DeadLetter uint64 `json:"dead_letters"` // dead letters
	Attempts   uint64 `json:"attempts"`     // JETPOOL_ATTEMPTS entries
	Batches    uint64 `json:"batches"`      // JETPOOL_BATCHES entries (batches and their records)
	Consumers  int    `json:"consumers"`    // the work consumer and the counting consumers
	Entry      bool   `json:"entry"`        // the job's JETPOOL_JOBS entry
}

// DeleteJob removes every trace of a job: its work consumer (first, so
// nothing more is delivered), queued work, results, dead letters, counting
// consumers, saved attempts, batch records, max-deliveries advisories, and
// last its JETPOOL_JOBS entry, so that a delete cut short is finished by
// running it again. A job without an entry but with traces is cleaned up
// too; one with neither is ErrJobNotFound.
//
// Records in flight when it runs may still store a result after it (their
// workers finish the call); results are purged a second time at the end to
// narrow that window. Pause or finish a job before deleting it.
//
// The server keeps the message ids of the job's records that had one (a
// dispatch that resumed the job, a replay) for the dedupe window
// (Config.DedupeWindow); a new job's records have none, and a nonce of
// their own (dispatcher/checking.go), so dispatching the same job id again
// publishes it afresh.
func (b *Broker) DeleteJob(ctx context.Context, id string) (*DeleteReport, error) {
	if err := CheckJobID(id); err != nil {
		return nil, err
	}
	rep := &DeleteReport{Job: id}
	_, _, err := b.GetJob(ctx, id)
	switch {
	case err == nil:
		rep.Entry = true
	case !errors.Is(err, ErrJobNotFound):
		return nil, err
	}
	consumers := []struct{ stream, name string }{{StreamWork, ConsumerName(id)}}
	for _, what := range Counters {
		consumers = append(consumers, struct{ stream, name string }{StreamResults, CounterName(id, what)})
	}
	for _, c := range consumers {
		err := b.JS.DeleteConsumer(ctx, c.stream, c.name)
		switch {
		case err == nil:
			rep.Consumers++
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return rep, fmt.Errorf("delete job %s: consumer %s: %w", id, c.name, err)
		}
	}
	purges := []struct {
		stream, subject string
		n               *uint64
	}{
		{StreamWork, WorkFilter(id), &rep.Work},
		{StreamResults, "jetpool.results." + id + ".>", &rep.Results},
		{StreamDLQ, "jetpool.dlq." + id + ".>", &rep.DeadLetter},
		{"KV_" + BucketAttempts, "$KV." + BucketAttempts + "." + id + ".>", &rep.Attempts},
		{"KV_" + BucketClaims, "$KV." + BucketClaims + "." + id + ".>", nil},
		{"KV_" + BucketBatches, "$KV." + BucketBatches + ".batch." + id + ".>", &rep.Batches},
		{"KV_" + BucketBatches, "$KV." + BucketBatches + ".rec." + id + ".>", &rep.Batches},
		{StreamAdvisories, "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamWork + "." + ConsumerName(id), nil},
		// Late results of records that were in flight.
		{StreamResults, "jetpool.results." + id + ".>", &rep.Results},
	}
	for _, p := range purges {
		n, err := b.purgeSubject(ctx, p.stream, p.subject)
		if err != nil {
			return rep, fmt.Errorf("delete job %s: %w", id, err)
		}
		if p.n != nil {
			*p.n += n
		}
	}
	if !rep.Entry && rep.Consumers == 0 && rep.Work+rep.Results+rep.DeadLetter+rep.Attempts+rep.Batches == 0 {
		return nil, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	if err := b.unindexJob(ctx, id); err != nil {
		return rep, fmt.Errorf("delete job %s: index: %w", id, err)
	}
	if rep.Entry {
		kv, err := b.KV(ctx, BucketJobs)
		if err != nil {
			return rep, err
		}
		if err := kv.Purge(ctx, id); err != nil {
			return rep, fmt.Errorf("delete job %s: entry: %w", id, err)
		}
	}
	return rep, nil
}

// PurgeWork removes every work message of job and returns how many went:
// a dispatch that takes a leased job over (Job.Lease) starts it again.
// It is the one purge a dispatcher may make (deploy/nats/accounts.conf).
func (b *Broker) PurgeWork(ctx context.Context, job string) (uint64, error) {
	return b.purgeSubject(ctx, StreamWork, WorkFilter(job))
}

// ForgetNewJob removes a job that never ran, as its dispatch leaves it when
// the input is refused (dispatcher/checking.go): its work messages, then its
// entries. It needs no more than a dispatcher may do; DeleteJob, for a job
// that ran, is an operator's.
func (b *Broker) ForgetNewJob(ctx context.Context, job string) error {
	if _, err := b.PurgeWork(ctx, job); err != nil {
		return fmt.Errorf("forget job %s: %w", job, err)
	}
	for _, bucket := range []string{BucketJobState, BucketJobs} {
		kv, err := b.KV(ctx, bucket)
		if err != nil {
			return err
		}
		if err := kv.Purge(ctx, job); err != nil {
			return fmt.Errorf("forget job %s: %s entry: %w", job, bucket, err)
		}
	}
	return nil
}

// purgeSubject purges the messages of stream on subject and returns how
// many went. It is the purge API request itself, for the count the server
// answers with (jetstream.Stream.Purge drops it).
func (b *Broker) purgeSubject(ctx context.Context, stream, subject string) (uint64, error) {
	req, _ := json.Marshal(jetstream.StreamPurgeRequest{Subject: subject})
	return b.purge(ctx, stream, subject, req)
}

// purge sends the purge request req of stream (for subject, to say).
func (b *Broker) purge(ctx context.Context, stream, subject string, req []byte) (uint64, error) {
	rctx, cancel := context.WithTimeout(ctx, purgeTimeout)
	defer cancel()
	m, err := b.NC.RequestWithContext(rctx, "$JS.API.STREAM.PURGE."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("purge %s of %s: %w", subject, stream, err)
	}
	var resp struct {
		Purged uint64              `json:"purged"`
		Error  *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge %s of %s: %w", subject, stream, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
			return 0, nil // a bucket never made: nothing to purge
		}
		return 0, fmt.Errorf("purge %s of %s: %w", subject, stream, resp.Error)
	}
	return resp.Purged, nil
}

// purgeTimeout bounds one purge: the server removes a large job's results
// (a million messages) in a few seconds.
const purgeTimeout = 2 * time.Minute

// SweepOptions steer Sweep.
type SweepOptions struct {
	// Retention: a job finished longer ago than this is deleted (DeleteJob);
	// 0 deletes none.
	Retention time.Duration
	// Grace: a job finished longer ago than this loses its work consumer.
	Grace time.Duration
	// DryRun reports what would be done and changes nothing.
	DryRun bool
	// Only, when set, limits the sweep to the jobs it accepts.
	Only func(*Job) bool
}

// Swept is what Sweep did (or, in a dry run, would do) to one job.
type Swept struct {
	Job             string        `json:"job"`
	Status          string        `json:"status"`
	Finished        time.Time     `json:"finished"` // when the job was last updated in a finished state
	Deleted         *DeleteReport `json:"deleted,omitempty"`
	ConsumerRemoved bool          `json:"consumer_removed,omitempty"`
	// Completed: the job had finished without anyone marking it (workers
	// never do), and Sweep marked it completed; its grace starts now.
	Completed bool `json:"completed,omitempty"`
}

// Sweep applies the lifecycle of finished jobs: a job is finished when
// every record of it was dispatched and has its final result, or it failed,
// and nothing of it is queued, in flight or waiting for redelivery. Only
// finished jobs are touched: a running, paused or half-dispatched job keeps
// everything, whatever its age. A finished job loses its work consumer once
// it has been finished for o.Grace, and is deleted once it has been
// finished for o.Retention.
//
// A job's finishing time is the last update of its JETPOOL_JOBS entry in a
// finished state. A job that finished while nobody was watching (workers
// do not mark jobs completed; `jetpool run` and `jetpool status` do) is
// marked completed here, and its grace starts then.
func (b *Broker) Sweep(ctx context.Context, o SweepOptions) ([]Swept, error) {
	jobs, err := b.ListJobs(ctx)
	if err != nil {
		return nil, err
	}
	bls, err := b.Backlogs(ctx)
	if err != nil {
		return nil, err
	}
	backlog := make(map[string]JobBacklog, len(bls))
	for _, bl := range bls {
		backlog[bl.Job] = bl
	}
	now := time.Now()
	var out []Swept
	for _, j := range jobs {
		if o.Only != nil && !o.Only(j) {
			continue
		}
		bl, hasConsumer := backlog[j.ID]
		if !j.Dispatched || bl.Queued > 0 || bl.AckPending > 0 {
			continue
		}
		s := Swept{Job: j.ID, Status: j.Status, Finished: j.Updated}
		switch j.Status {
		case JobCompleted, JobFailed, JobCancelled:
		case JobRunning:
			c, err := b.JobCounts(ctx, j, false)
			if err != nil {
				return out, err
			}
			if c.Done < j.Total {
				continue
			}
			s.Completed, s.Status, s.Finished = true, JobCompleted, now
			if !o.DryRun {
				nj, err := b.UpdateJob(ctx, j.ID, func(j *Job) bool {
					if j.Status != JobRunning {
						return false
					}
					j.Status = JobCompleted
					return true
				})
				if err != nil {
					return out, err
				}
				s.Status, s.Finished = nj.Status, nj.Updated
			}
		default:
			continue
		}
		age := now.Sub(s.Finished)
		switch {
		case o.Retention > 0 && age >= o.Retention:
			s.Deleted = &DeleteReport{Job: j.ID}
			if !o.DryRun {
				still, _, err := b.stillFinished(ctx, j.ID, s.Finished)
				if err != nil {
					return out, err
				}
				if !still {
					continue
				}
				if s.Deleted, err = b.DeleteJob(ctx, j.ID); err != nil {
					return out, err
				}
			}
		case hasConsumer && age >= o.Grace:
			s.ConsumerRemoved = true
			if !o.DryRun {
				removed, err := b.removeConsumer(ctx, j.ID, s.Finished)
				if err != nil {
					return out, err
				}
				if !removed {
					continue
				}
			}
		default:
			if !s.Completed {
				continue
			}
		}
		out = append(out, s)
	}
	return out, nil
}

// stillFinished reports whether the job is as Sweep read it: finished, and
// last updated when it finished (a replay reopens a job, which updates it),
// with the revision it read.
func (b *Broker) stillFinished(ctx context.Context, id string, finished time.Time) (bool, uint64, error) {
	j, rev, err := b.GetJob(ctx, id)
	if errors.Is(err, ErrJobNotFound) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	return j.Ended() && j.Updated.Equal(finished), rev, nil
}

// removeConsumer deletes a finished job's work consumer, unless the job was
// reopened since Sweep read it. A replay may reopen it while the consumer
// goes: if the job's entry changed meanwhile, the consumer is made again.
// With the replay restoring the consumer after it reopens the job
// (RestoreConsumer), whichever of the two comes last leaves one, so a
// replayed record is never without a consumer.
func (b *Broker) removeConsumer(ctx context.Context, id string, finished time.Time) (bool, error) {
	still, _, err := b.stillFinished(ctx, id, finished)
	if err != nil || !still {
		return false, err
	}
	// A work stream that keeps acked messages (keepacked.go) has the job's
	// purged first: a consumer made again (a replay) would deliver them.
	keeps, err := b.WorkKeepsAcked(ctx)
	if err != nil {
		return false, err
	}
	if keeps {
		if _, err := b.PurgeAcked(ctx, id, 0); err != nil {
			return false, err
		}
	}
	if err := b.JS.DeleteConsumer(ctx, StreamWork, ConsumerName(id)); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return false, fmt.Errorf("remove the work consumer of job %s: %w", id, err)
	}
	// Reopened meanwhile (its state changed: a replay)? Then the consumer
	// is made again.
	if still, _, err = b.stillFinished(ctx, id, finished); err != nil || still {
		return err == nil, err
	}
	j, _, err := b.GetJob(ctx, id)
	if err != nil {
		return false, err
	}
	return false, b.RestoreConsumer(ctx, j)
}
