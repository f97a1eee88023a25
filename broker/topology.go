package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
)

// Ensure creates or updates every stream and bucket of docs/design.md §4. It is
// idempotent and safe to call from every process at start.
//
// It reads before it writes: what exists with the wanted settings is left
// alone, so a process with least privilege (the deploy/ `worker` user, which
// may read stream info but never create or update a stream) passes Ensure
// once the dispatcher or an operator has set the topology up. A create or
// update it is refused fails with the server's permissions error.
func (b *Broker) Ensure(ctx context.Context) error {
	// A cluster started a few seconds ago (compose, Kubernetes) may not
	// answer yet while it elects its meta leader and places streams: wait
	// for it, within a bound, and say what is awaited.
	began := time.Now()
	said := time.Time{}
	for delay := 100 * time.Millisecond; ; delay = min(delay*2, 2*time.Second) {
		err := b.ensure(ctx)
		if err == nil || ctx.Err() != nil || !notReady(err) {
			return err
		}
		if errors.Is(err, nats.ErrNoResponders) && !b.serverJetStream() && time.Since(began) > noJetStreamWait {
			// A server without JetStream whose cluster, if any, answers
			// no JetStream request either: not a cluster still forming.
			return fmt.Errorf("JetStream is not enabled on the NATS server at %s (nor anywhere it routes to): %w", redact(b.url), err)
		}
		if time.Since(began)+delay > ensureWait {
			return fmt.Errorf("JetStream not ready after %s: %w", ensureWait.Round(time.Second), err)
		}
		if time.Since(said) > 5*time.Second {
			said = time.Now()
			b.Log.Warn().Err(err).Str("url", redact(b.url)).Dur("giving_up_in", (ensureWait - time.Since(began)).Round(time.Second)).
				Msg("waiting for JetStream: the cluster may still be electing its leaders or placing streams")
		}
		if err := (retry.SystemClock{}).Sleep(ctx, delay); err != nil {
			return err
		}
	}
}

// ensureWait bounds Ensure's wait for a JetStream that does not answer yet.
var ensureWait = 60 * time.Second

// noJetStreamWait is how long Ensure waits on a server that says it has no
// JetStream before it takes it at its word.
const noJetStreamWait = 2 * time.Second

// serverJetStream reports whether the server connected to says it runs
// JetStream.
func (b *Broker) serverJetStream() bool {
	on, _ := b.NC.ConnectedServerJetStream()
	return on
}

// notReady reports whether err is JetStream not answering yet, or not yet
// able to place what is asked (a cluster still forming), rather than an
// answer: a refused request, a permissions error.
func notReady(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case 10005, 10008, 10009: // no suitable peers yet, temporarily unavailable, cannot handle the request
			return true
		}
	}
	return unanswered(err) ||
		strings.Contains(err.Error(), "no suitable peers") || strings.Contains(err.Error(), "temporarily unavailable")
}

func (b *Broker) ensure(ctx context.Context) error {
	streams, err := b.streamConfigs()
	if err != nil {
		return err
	}
	for _, sc := range streams {
		if err := b.ensureStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range b.bucketConfigs() {
		kv, err := b.ensureBucket(ctx, kc)
		if err != nil {
			return fmt.Errorf("bucket %s: %w", kc.Bucket, err)
		}
		b.mu.Lock()
		b.kv[kc.Bucket] = kv
		b.mu.Unlock()
	}
	return b.ensureCatcher(ctx)
}

// replicas is the replication factor of jetpool's streams and buckets.
func (b *Broker) replicas() int { return max(b.Cfg.Replicas, 1) }

// streamConfigs are jetpool's streams as the configuration asks for them.
func (b *Broker) streamConfigs() ([]jetstream.StreamConfig, error) {
	r := b.replicas()
	dedupe := b.Cfg.DedupeWindow
	if dedupe <= 0 {
		dedupe = 2 * time.Hour
	}
	// The results and dead letters are JSON, kept for days: S2 pays there;
	// the work stream's messages go on ack (docs/operations.md "Retention").
	// A cap refuses new messages rather than dropping old ones (Discard
	// new): nothing is dropped silently.
	compression, err := b.Cfg.compression()
	if err != nil {
		return nil, err
	}
	return []jetstream.StreamConfig{
		{
			Name:        StreamWork,
			Description: workDescription(b.workRetention()),
			Subjects:    []string{"jetpool.work.>"},
			Retention:   b.workRetention(),
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dedupe,
			Discard:     jetstream.DiscardNew,
			// Atomic batches (broker/atomic.go) where every write is synced.
			AllowAtomicPublish: b.Cfg.Batched(),
		},
		{
			Name:        StreamDLQ,
			Description: "jetpool dead letters: the record as it was for the action, Jetpool-* headers explain",
			Subjects:    []string{"jetpool.dlq.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			Duplicates:  dedupe,
			AllowDirect: true,
			Discard:     jetstream.DiscardNew,
			MaxBytes:    int64(b.Cfg.DLQMaxBytes),
			Compression: compression,
		},
		{
			Name:              StreamResults,
			Description:       "jetpool results: one final result per record, action and outcome",
			Subjects:          []string{"jetpool.results.>"},
			Retention:         jetstream.LimitsPolicy,
			Storage:           jetstream.FileStorage,
			Replicas:          r,
			MaxMsgsPerSubject: 1,
			Duplicates:        dedupe,
			AllowDirect:       true,
			Discard:           jetstream.DiscardNew,
			MaxBytes:          int64(b.Cfg.ResultsMaxBytes),
			Compression:       compression,
			// Group commits of results (resultbatch.go) where every write
			// is synced.
			AllowAtomicPublish: b.Cfg.Batched(),
		},
		{
			Name:        StreamAdvisories,
			Description: "MAX_DELIVERIES advisories of the work stream, for the poison-pill catcher",
			Subjects:    []string{AdvisorySubject},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    r,
			MaxAge:      7 * 24 * time.Hour,
		},
	}, nil
}

// bucketConfigs are jetpool's KV buckets.
func (b *Broker) bucketConfigs() []jetstream.KeyValueConfig {
	r := b.replicas()
	return []jetstream.KeyValueConfig{
		{Bucket: BucketJobs, Description: "jetpool jobs: workflow, totals, status", History: 1, Replicas: r, Storage: jetstream.FileStorage},
		{Bucket: BucketJobState, Description: "jetpool job states: status and reason, written by workers", History: 1, Replicas: r, Storage: jetstream.FileStorage},
		{Bucket: BucketAttempts, Description: "jetpool: attempts of records waiting for redelivery", History: 1, Replicas: r, Storage: jetstream.FileStorage, TTL: 7 * 24 * time.Hour},
		{Bucket: BucketLimits, Description: "jetpool: shared rate-limit state per provider", History: 1, Replicas: r, Storage: jetstream.FileStorage},
		{Bucket: BucketBatches, Description: "jetpool: submitted provider batches", History: 1, Replicas: r, Storage: jetstream.FileStorage},
		{Bucket: BucketTenant, Description: "jetpool: the tenant's budget (its operator's) and the ledger sharing it (the workers')", History: 1, Replicas: r, Storage: jetstream.FileStorage},
		// A claim lives seconds and guards against a twin delivery (Claim),
		// not against the loss of every node: in memory, replicated, it is
		// written without an fsync even where the servers sync every write.
		// No byte limit: one would be reserved from the servers' memory
		// store whether used or not.
		{Bucket: BucketClaims, Description: "jetpool: claims of model calls under way", History: 1, Replicas: r, Storage: jetstream.MemoryStorage,
			TTL: ClaimsKept},
	}
}

// ensureCatcher makes the poison-pill catcher's consumer on the advisories
// stream, or updates it when it differs.
func (b *Broker) ensureCatcher(ctx context.Context) error {
	cc := jetstream.ConsumerConfig{
		Durable:     ConsumerMaxDeliveries,
		Description: "jetpool poison-pill catcher: moves records past MaxDeliver to the DLQ",
		AckPolicy:   jetstream.AckExplicitPolicy,
		AckWait:     30 * time.Second,
		MaxDeliver:  -1,
	}
	if c, err := b.JS.Consumer(ctx, StreamAdvisories, ConsumerMaxDeliveries); err == nil {
		have := c.CachedInfo().Config
		if have.Description == cc.Description && have.AckPolicy == cc.AckPolicy && have.AckWait == cc.AckWait && have.MaxDeliver == cc.MaxDeliver {
			return nil
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("consumer %s: %w", ConsumerMaxDeliveries, err)
	}
	if _, err := b.JS.CreateOrUpdateConsumer(ctx, StreamAdvisories, cc); err != nil {
		return fmt.Errorf("consumer %s: %w", ConsumerMaxDeliveries, err)
	}
	return nil
}

// ensureStream creates sc, or updates it when a setting jetpool chooses
// differs; it writes nothing when the stream is as wanted.
func (b *Broker) ensureStream(ctx context.Context, sc jetstream.StreamConfig) error {
	s, err := b.JS.Stream(ctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = b.JS.CreateOrUpdateStream(ctx, sc)
		return err
	}
	if err != nil {
		return err
	}
	have := s.CachedInfo().Config
	if sc.Name == StreamWork && have.Retention != sc.Retention {
		// A stream's retention is fixed when it is made: the work stream
		// keeps the one it was made with (keepacked.go).
		sc.Retention, sc.Description = have.Retention, workDescription(have.Retention)
	}
	if streamAsWanted(have, sc) {
		return nil
	}
	if sc.MaxBytes == 0 {
		sc.MaxBytes = have.MaxBytes // unset here: an operator's cap stays
	}
	if !streamAsWanted(have, tunedAs(sc, have)) {
		_, err = b.JS.CreateOrUpdateStream(ctx, sc)
		return err
	}
	// Only its limits or compression differ: a process that may not update
	// streams (the deploy/ worker, whose refused request goes unanswered)
	// works with them as they are, after a short wait.
	uctx, cancel := context.WithTimeout(ctx, tunedUpdateWait)
	defer cancel()
	if _, err := b.JS.CreateOrUpdateStream(uctx, sc); err != nil {
		b.Log.Warn().Str("stream", sc.Name).Err(err).
			Msg("stream limits or compression differ from this process's settings and could not be updated; using them as they are")
	}
	return nil
}

// tunedUpdateWait bounds an update of a stream's limits or compression
// only: the server answers one it allows at once.
const tunedUpdateWait = 2 * time.Second

// streamAsWanted compares the settings jetpool sets; a zero setting is the
// server's default and is not compared (the server fills it in): a MaxBytes
// of 0 (JETPOOL_RESULTS_MAX_BYTES unset) leaves the stream's cap as it is.
func streamAsWanted(have, want jetstream.StreamConfig) bool {
	return have.Description == want.Description && slices.Equal(have.Subjects, want.Subjects) &&
		have.Retention == want.Retention && have.Storage == want.Storage && have.Replicas == want.Replicas &&
		have.Discard == want.Discard && have.AllowDirect == want.AllowDirect && have.MaxAge == want.MaxAge &&
		have.Compression == want.Compression && (!want.AllowAtomicPublish || have.AllowAtomicPublish) &&
		(want.Duplicates == 0 || have.Duplicates == want.Duplicates) &&
		(want.MaxMsgsPerSubject == 0 || have.MaxMsgsPerSubject == want.MaxMsgsPerSubject) &&
		(want.MaxBytes == 0 || have.MaxBytes == want.MaxBytes)
}

// tunedAs is want with the settings an operator may tune (limits, discard,
// compression) taken from have.
func tunedAs(want, have jetstream.StreamConfig) jetstream.StreamConfig {
	want.MaxBytes, want.Discard, want.Compression = have.MaxBytes, have.Discard, have.Compression
	return want
}

// ensureBucket creates kc, or updates it when a setting jetpool chooses
// differs; it binds to the bucket without writing when it is as wanted.
func (b *Broker) ensureBucket(ctx context.Context, kc jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	s, err := b.JS.Stream(ctx, "KV_"+kc.Bucket)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return b.JS.CreateOrUpdateKeyValue(ctx, kc)
	}
	if err != nil {
		return nil, err
	}
	have := s.CachedInfo().Config
	history := max(int64(kc.History), 1)
	if have.Description == kc.Description && have.Replicas == kc.Replicas && have.MaxAge == kc.TTL &&
		have.MaxMsgsPerSubject == history && have.Storage == kc.Storage && have.MaxBytes == cmp.Or(kc.MaxBytes, -1) {
		return b.JS.KeyValue(ctx, kc.Bucket)
	}
	return b.JS.CreateOrUpdateKeyValue(ctx, kc)
}

// KV returns a bucket created by Ensure (or binds to it).
func (b *Broker) KV(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv, ok := b.kv[bucket]
	b.mu.Unlock()
	if ok {
		return kv, nil
	}
	kv, err := b.JS.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w (has anything run Ensure yet?)", bucket, err)
	}
	b.mu.Lock()
	b.kv[bucket] = kv
	b.mu.Unlock()
	return kv, nil
}

// ConsumerConfig is the durable work consumer of one job.
func (b *Broker) ConsumerConfig(job string, maxDeliver int) jetstream.ConsumerConfig {
	aw := b.Cfg.AckWait
	if aw <= 0 {
		aw = AckWaitDefault
	}
	map_ := b.Cfg.MaxAckPending
	if map_ <= 0 {
		map_ = MaxAckPendingDefault
	}
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(job),
		Description:   "jetpool work of job " + job,
		FilterSubject: WorkFilter(job),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       aw,
		// MaxDeliver is -1 (unlimited) for jobs dispatched by this version:
		// jetpool enforces the record's budget itself (RecordState). Jobs of
		// older versions keep theirs, and the MAX_DELIVERIES catcher.
		MaxDeliver:    maxDeliver,
		MaxAckPending: map_,
		// BackOff applies only to AckWait timeouts (a crashed or hung
		// worker), never to a Nak: the worker sets Nak delays itself.
		Metadata: map[string]string{"jetpool.job": job},
	}
}

// EnsureConsumer creates or updates the job's durable work consumer; an
// existing one keeps its pause (EnsureConsumerFrom).
func (b *Broker) EnsureConsumer(ctx context.Context, job string, maxDeliver int) (jetstream.Consumer, error) {
	return b.EnsureConsumerFrom(ctx, job, maxDeliver, time.Time{})
}

// EnsureConsumerFrom creates or updates the job's durable work consumer,
// paused until startAt when that is set and ahead (a scheduled start: the
// server delivers nothing of the job until then, across restarts). Without
// startAt an existing consumer keeps the pause it has: the server takes an
// update without one as a resume.
func (b *Broker) EnsureConsumerFrom(ctx context.Context, job string, maxDeliver int, startAt time.Time) (jetstream.Consumer, error) {
	cfg := b.ConsumerConfig(job, maxDeliver)
	switch {
	case !startAt.IsZero() && time.Now().Before(startAt):
		at := startAt.UTC()
		cfg.PauseUntil = &at
	default:
		if c, err := b.JS.Consumer(ctx, StreamWork, cfg.Durable); err == nil && c.CachedInfo().Paused {
			cfg.PauseUntil = c.CachedInfo().Config.PauseUntil
		}
	}
	c, err := b.JS.CreateOrUpdateConsumer(ctx, StreamWork, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s: %w", ConsumerName(job), err)
	}
	return c, nil
}

// Count returns how many messages of stream match filter, computed by the
// server (an ephemeral consumer's pending count): O(subjects matched) in the
// server, no messages cross the wire.
//
// A work-queue stream allows no such consumer; there it sums the stream's
// per-subject counts instead (a job has one subject per action).
func (b *Broker) Count(ctx context.Context, stream, filter string) (uint64, error) {
	if stream == StreamWork || stream == StreamAdvisories {
		s, err := b.stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return 0, fmt.Errorf("count %s %s: %w", stream, filter, err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n, nil
	}
	return b.countFiltered(ctx, stream, filter)
}

// LastMsg returns the last message on subject in stream, or nil when none.
//
// The lookup is answered by the stream's leader (leaderget.go: a replica's
// direct get can be behind). While a stream is being placed (a cluster's
// streams made seconds ago) or has lost every member, it is not found or
// nobody answers: the lookup is retried with backoff for up to
// noRespondersWait before that is an error.
func (b *Broker) LastMsg(ctx context.Context, stream, subject string) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	gaveUp, err := askLeader(ctx, stream, func() (err error) {
		m, err = b.leaderLast(ctx, stream, subject)
		return err
	})
	if gaveUp {
		return nil, fmt.Errorf("no server answered a lookup in stream %s for %s (the stream is not placed, or has no member up): %w",
			stream, noRespondersWait, err)
	}
	return m, err
}

// askLeader calls get, a request to stream's leader, until it is answered:
// one nobody answers, or that timed out while ctx has time left (it went to
// a node that could not answer: reconnecting, just thawed), or that the
// stream cannot answer yet, is asked again, for up to noRespondersWait.
func askLeader(ctx context.Context, stream string, get func() error) (gaveUp bool, err error) {
	noAnswer := func(err error) bool {
		return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, errUnavailable) ||
			(ctx.Err() == nil && unanswered(err))
	}
	return untilAnswered(ctx, noRespondersWait, 20*time.Millisecond, noRespondersWait, noAnswer,
		func() { noResponders(stream) }, get)
}

// untilAnswered calls try until it returns nil or an error that is an
// answer (noAnswer false). A missing answer is tried again after a delay
// (from first, doubling, at most maxDelay; before is called first) for up
// to wait from the first one; past that, gaveUp is set with the last
// error.
func untilAnswered(ctx context.Context, wait, first, maxDelay time.Duration, noAnswer func(error) bool,
	before func(), try func() error) (gaveUp bool, err error) {
	var deadline time.Time // from the first try nobody answered
	for delay := first; ; delay = min(delay*2, maxDelay) {
		err := try()
		if err == nil || ctx.Err() != nil || !noAnswer(err) {
			return false, err
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(wait)
		}
		if time.Now().Add(delay).After(deadline) {
			return true, err
		}
		before()
		if err := (retry.SystemClock{}).Sleep(ctx, delay); err != nil {
			return false, err
		}
	}
}

// noRespondersWait is how long LastMsg retries a lookup nobody answers.
var noRespondersWait = 3 * time.Second

// noResponders is called before each retry of a lookup nobody answered
// (a test's hook).
var noResponders = func(stream string) {}

// JobUnseen reports whether the job has left no trace: no work consumer
// (made before a dispatch publishes anything) and no result (a last-by-
// subject lookup, whatever the size of the stream). Both are reads the
// least-privileged dispatcher may make.
func (b *Broker) JobUnseen(ctx context.Context, job string) (bool, error) {
	_, err := b.JS.Consumer(ctx, StreamWork, ConsumerName(job))
	switch {
	case err == nil:
		return false, nil
	case !errors.Is(err, jetstream.ErrConsumerNotFound):
		return false, fmt.Errorf("look for the work consumer of job %s: %w", job, err)
	}
	m, err := b.LastMsg(ctx, StreamResults, ResultFilter(job, "", ""))
	if err != nil {
		return false, fmt.Errorf("look for results of job %s: %w", job, err)
	}
	return m == nil, nil
}

// DeleteMsg removes one message from a stream; a missing one is not an error.
func (b *Broker) DeleteMsg(ctx context.Context, stream string, seq uint64) error {
	s, err := b.stream(ctx, stream)
	if err != nil {
		return err
	}
	err = s.DeleteMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrMsgDeleteUnsuccessful) {
		return nil
	}
	return err
}

// Stream binds to a stream by name.
func (b *Broker) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	return b.stream(ctx, name)
}

func (b *Broker) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	b.mu.Lock()
	s, ok := b.streams[name]
	b.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := b.JS.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", name, err)
	}
	b.mu.Lock()
	b.streams[name] = s
	b.mu.Unlock()
	return s, nil
}

// WatchAll starts a watch of every key of kv. Starting one creates a
// consumer on the bucket's stream, and on a cluster whose stream leader is
// still being elected that request can go unanswered (nats.go gives up on
// it after its default 5 s): it is tried again, with backoff, for up to
// watchStartWait, so a worker started with its cluster does not fail.
func WatchAll(ctx context.Context, kv jetstream.KeyValue) (jetstream.KeyWatcher, error) {
	var w jetstream.KeyWatcher
	gaveUp, err := untilAnswered(ctx, watchStartWait, 100*time.Millisecond, 2*time.Second, unanswered, func() {},
		func() (err error) {
			w, err = kv.WatchAll(ctx)
			return err
		})
	if gaveUp {
		return nil, fmt.Errorf("no answer to starting a watch of %s for %s: %w", kv.Bucket(), watchStartWait, err)
	}
	return w, err
}

// watchStartWait is how long WatchAll retries a start nobody answers.
var watchStartWait = 30 * time.Second

// Unanswered reports whether err is a request that got no answer in time,
// or no server to answer it (a busy or electing cluster, a node down): worth
// asking again, where an answer that refuses is not.
func Unanswered(err error) bool {
	return unanswered(err) || errors.Is(err, jetstream.ErrNoStreamResponse)
}

// unanswered: a JetStream API request got no answer in time, or no server
// to answer it.
func unanswered(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
}

// Transient reports whether err is the store not answering yet rather
// than an answer: no answer in time, no responders, a stream or consumer
// whose leader is being elected (JetStream temporarily unavailable). A
// read that met one may be tried again.
func Transient(err error) bool {
	return Unanswered(err) || notReady(err) || errors.Is(err, errUnavailable)
}
