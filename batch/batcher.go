package batch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// Defaults of Config.
const (
	// LeaseDefault is how long an owner's claim on a batch lasts without
	// renewal (every poll renews it). Another batcher takes over a batch
	// only once its lease has passed: a crashed process's batches are
	// resumed by a new one after at most this long (at once by a process
	// with the same owner id).
	LeaseDefault = 5 * time.Minute
	// HeartbeatDefault is the InProgress interval of held work messages.
	HeartbeatDefault = 10 * time.Second
	// SubmitAttemptsMax bounds the submissions of one batch that fail
	// transiently; then its records fail with reason exhausted.
	SubmitAttemptsMax = 5
	// SubmitBackoff is the base delay between submissions (doubling, capped at 4 polls).
	SubmitBackoff = time.Second
	// MaxHeaderTokenBytes bounds the custom_ids of one batch so that its
	// header stays well under NATS's default 1 MiB max payload.
	MaxHeaderTokenBytes = 800 << 10
)

// ErrNoClient is returned (wrapped) by Add when the action's provider has
// no batch API.
var ErrNoClient = errors.New("no batch API")

// Handler writes what a batch produced, as the online path would. Each
// method is idempotent: after a crash it may be called again for the same
// item, and an error leaves the item to be handled on a later poll.
type Handler interface {
	// Succeed writes the record's ok result and hands it to the next action.
	Succeed(ctx context.Context, a *workflow.Action, it *Item, resp provider.Response) error
	// Fail dead-letters the record and writes its failed result.
	Fail(ctx context.Context, a *workflow.Action, it *Item, final *retry.Error, reason retry.Reason, diag string) error
	// Online sends the record through the online path (fallback: online),
	// where the rounds in it.Attempts count against max_calls.
	Online(ctx context.Context, a *workflow.Action, it *Item) error
}

// Config configures a Batcher.
type Config struct {
	Broker   *broker.Broker
	Job      string
	Workflow *workflow.Workflow
	Owner    string // this process; batches it owns are resumed at once on Start
	// Client builds an action's batch client (NewClient of its provider by default).
	Client    func(a *workflow.Action) (Client, error)
	Handler   Handler
	Log       zerolog.Logger
	Heartbeat time.Duration // HeartbeatDefault
	Lease     time.Duration // LeaseDefault (at least 3 polls of the action)
}

// Pending is a work message handed to the batcher.
type Pending struct {
	Msg     jetstream.Msg
	Action  *workflow.Action
	Item    Item // ID, Data, Replays, Deliveries
	Request provider.Request
}

// Batcher groups one job's batch-mode records into provider batches,
// records them durably, submits them, polls them and maps their results
// back. Start it, then Stop it; both are safe to call twice.
type Batcher struct {
	cfg Config
	kv  jetstream.KeyValue
	log zerolog.Logger

	mu      sync.Mutex
	started bool
	stopped bool
	clients map[string]Client
	open    map[string]*group // by action: records being assembled
	sealed  []*group          // full or due, to be recorded
	writing []*group          // being recorded now (still heartbeated)
	owned   map[string]*tracked
	kick    chan struct{}
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

type entry struct {
	item *Item
	msgs []jetstream.Msg
}

type group struct {
	action *workflow.Action
	limits Limits
	items  []*entry
	tokens map[string]*entry
	bytes  int
	tokenB int
	first  time.Time
}

// tracked is a batch this batcher owns.
type tracked struct {
	h       *Header
	rev     uint64
	due     time.Time
	resumed bool // claimed from KV (after a restart or another owner's death)
}

// New makes a batcher.
func New(cfg Config) *Batcher {
	cfg.Heartbeat = cmp.Or(cfg.Heartbeat, HeartbeatDefault)
	cfg.Lease = cmp.Or(cfg.Lease, LeaseDefault)
	if cfg.Client == nil {
		wf := cfg.Workflow
		cfg.Client = func(a *workflow.Action) (Client, error) { return NewClient(wf.Providers[a.Provider]) }
	}
	return &Batcher{cfg: cfg, log: cfg.Log.With().Str("job", cfg.Job).Logger(), clients: map[string]Client{},
		open: map[string]*group{}, owned: map[string]*tracked{}, kick: make(chan struct{}, 1)}
}

// Start binds the bucket, claims the batches this owner left behind, and
// starts the loops.
func (b *Batcher) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.started || b.stopped {
		return nil
	}
	kv, err := b.cfg.Broker.KV(ctx, broker.BucketBatches)
	if err != nil {
		return err
	}
	b.kv = kv
	b.started = true
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b.cancel = cancel
	b.wg.Add(2)
	go func() { defer b.wg.Done(); b.loop(lctx) }()
	go func() { defer b.wg.Done(); b.heartbeat(lctx) }()
	return nil
}

// Stop ends the loops (an in-flight submission or poll is cancelled: its
// batch stays in KV, to be resumed) and hands back (Nak) the work messages
// of records not yet recorded.
func (b *Batcher) Stop() {
	b.mu.Lock()
	if b.stopped || !b.started {
		b.stopped = true
		b.mu.Unlock()
		return
	}
	b.stopped = true
	b.cancel()
	b.mu.Unlock()
	b.wg.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, g := range b.allGroups() {
		for _, e := range g.items {
			for _, m := range e.msgs {
				_ = m.Nak()
			}
		}
	}
	b.open, b.sealed = map[string]*group{}, nil
}

func (b *Batcher) allGroups() []*group {
	gs := append(append([]*group(nil), b.sealed...), b.writing...)
	for _, g := range b.open {
		gs = append(gs, g)
	}
	return gs
}

func (b *Batcher) client(a *workflow.Action) (Client, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.clients[a.Provider]; ok {
		return c, nil
	}
	c, err := b.cfg.Client(a)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoClient, err)
	}
	b.clients[a.Provider] = c
	return c, nil
}

// Add takes a work message for its action's next batch. The message stays
// unacked (with InProgress heartbeats) until the batch is recorded in KV,
// then it is acked. A record already recorded in a batch is acked at once.
// An error wrapping ErrNoClient is the action's fault; any other error
// leaves the message to the caller (nak it).
func (b *Batcher) Add(ctx context.Context, p Pending) error {
	a := p.Action
	c, err := b.client(a)
	if err != nil {
		return err
	}
	it := p.Item
	token := it.Token()
	if old, _, err := getItem(ctx, b.kv, ItemKey(b.cfg.Job, a.Name, token)); err == nil && old.Replays == it.Replays {
		_, _, herr := getHeader(ctx, b.kv, HeaderKey(b.cfg.Job, a.Name, old.Batch))
		if herr == nil {
			// A redelivery of a record its batch already owns.
			_ = p.Msg.Ack()
			return nil
		}
		if !errors.Is(herr, jetstream.ErrKeyNotFound) {
			return herr
		}
		// An item without its header: a batcher died while recording it. Start over.
	} else if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return err
	}
	line, err := c.Line(token, p.Request)
	if err != nil {
		return fmt.Errorf("%w: encoding the request: %w", ErrNoClient, err)
	}
	it.Line = line
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stopped {
		return errors.New("batcher stopped")
	}
	g := b.open[a.Name]
	if e, dup := groupEntry(g, token); dup {
		e.msgs = append(e.msgs, p.Msg)
		return nil
	}
	lim := c.Limits()
	maxRecords := min(cmp.Or(a.Batch.MaxRecords, workflow.BatchMaxRecordsDefault), lim.MaxRequests)
	if g != nil && (g.bytes+len(line)+1 > lim.MaxBytes || g.tokenB+len(token)+3 > MaxHeaderTokenBytes) {
		b.seal(a.Name)
		g = nil
	}
	if g == nil {
		g = &group{action: a, limits: lim, tokens: map[string]*entry{}, first: time.Now()}
		b.open[a.Name] = g
		b.wake() // the loop schedules the group's max_wait
	}
	e := &entry{item: &it, msgs: []jetstream.Msg{p.Msg}}
	g.items = append(g.items, e)
	g.tokens[token] = e
	g.bytes += len(line) + 1
	g.tokenB += len(token) + 3
	if len(g.items) >= maxRecords {
		b.seal(a.Name)
	}
	return nil
}

func groupEntry(g *group, token string) (*entry, bool) {
	if g == nil {
		return nil, false
	}
	e, ok := g.tokens[token]
	return e, ok
}

// seal moves an open group to the sealed queue. b.mu is held.
func (b *Batcher) seal(action string) {
	if g := b.open[action]; g != nil {
		delete(b.open, action)
		b.sealed = append(b.sealed, g)
		b.wake()
	}
}

func (b *Batcher) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// heartbeat keeps the held work messages from reaching AckWait.
func (b *Batcher) heartbeat(ctx context.Context) {
	t := time.NewTicker(b.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b.mu.Lock()
		var msgs []jetstream.Msg
		for _, g := range b.allGroups() {
			for _, e := range g.items {
				msgs = append(msgs, e.msgs...)
			}
		}
		b.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress()
		}
	}
}

// loop records sealed groups, steps owned batches when due, and scans KV
// for batches to resume.
func (b *Batcher) loop(ctx context.Context) {
	nextScan := time.Time{}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-b.kick:
		}
		now := time.Now()
		b.mu.Lock()
		for name, g := range b.open {
			if now.Sub(g.first) >= g.action.Batch.MaxWait {
				b.seal(name)
			}
		}
		b.writing, b.sealed = b.sealed, nil
		sealed := b.writing
		b.mu.Unlock()
		for _, g := range sealed {
			if ctx.Err() != nil {
				return // Stop hands the rest back
			}
			b.record(ctx, g)
		}
		b.mu.Lock()
		b.writing = nil
		b.mu.Unlock()
		if !now.Before(nextScan) {
			b.scan(ctx)
			nextScan = time.Now().Add(max(b.cfg.Lease/3, 50*time.Millisecond))
		}
		for key, t := range b.owned {
			if ctx.Err() != nil {
				return
			}
			if !time.Now().Before(t.due) {
				if !b.step(ctx, t) {
					delete(b.owned, key)
				}
			}
		}
		// Sleep until the next thing is due.
		wake := nextScan
		b.mu.Lock()
		for _, g := range b.open {
			wake = minTime(wake, g.first.Add(g.action.Batch.MaxWait))
		}
		b.mu.Unlock()
		for _, t := range b.owned {
			wake = minTime(wake, t.due)
		}
		timer.Reset(max(time.Until(wake), time.Millisecond))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (b *Batcher) action(name string) *workflow.Action {
	a, _ := b.cfg.Workflow.Action(name)
	return a
}

func (b *Batcher) lease(a *workflow.Action) time.Time {
	return time.Now().Add(max(b.cfg.Lease, 3*a.Batch.Poll))
}

// record writes a sealed group to KV (items, then its header), then acks
// its work messages: from here on the batch is durable and is submitted,
// polled and resumed from KV alone.
func (b *Batcher) record(ctx context.Context, g *group) {
	a := g.action
	items := make([]*Item, len(g.items))
	for i, e := range g.items {
		items[i] = e.item
	}
	key := firstKey(b.cfg.Job, a.Name, items)
	nak := func(err error) {
		b.log.Warn().Err(err).Str("action", a.Name).Msg("batch not recorded; its records are handed back")
		for _, e := range g.items {
			for _, m := range e.msgs {
				_ = m.NakWithDelay(time.Second)
			}
		}
	}
	h := &Header{Key: key, Job: b.cfg.Job, Action: a.Name, Provider: a.Provider, Kind: g.limitsKind(b), State: StateSubmitting,
		Round: 1, Owner: b.cfg.Owner, LeaseUntil: b.lease(a), Created: time.Now().UTC()}
	for _, it := range items {
		it.Batch, it.Round = key, 1
		data, _ := json.Marshal(it)
		if _, err := b.kv.Put(ctx, ItemKey(b.cfg.Job, a.Name, it.Token()), data); err != nil {
			nak(err)
			return
		}
		h.Tokens = append(h.Tokens, it.Token())
	}
	data, _ := json.Marshal(h)
	rev, err := b.kv.Create(ctx, HeaderKey(b.cfg.Job, a.Name, key), data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// The same records, recorded before: that batch owns them.
		for _, e := range g.items {
			for _, m := range e.msgs {
				_ = m.Ack()
			}
		}
		return
	}
	if err != nil {
		nak(err)
		return
	}
	for _, e := range g.items {
		for _, m := range e.msgs {
			_ = m.Ack()
		}
	}
	b.log.Debug().Str("action", a.Name).Str("batch", key).Int("records", len(items)).Msg("batch recorded")
	b.owned[h.Key] = &tracked{h: h, rev: rev, due: time.Now()}
}

func (g *group) limitsKind(b *Batcher) string {
	if c, err := b.client(g.action); err == nil {
		return c.Kind()
	}
	return ""
}

// scan claims the job's batches that this owner left behind or whose
// owner's lease has passed.
func (b *Batcher) scan(ctx context.Context) {
	hs, err := listHeaders(ctx, b.kv, b.cfg.Job)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn().Err(err).Msg("listing batches")
		}
		return
	}
	for _, h := range hs {
		if _, ok := b.owned[h.Key]; ok {
			continue
		}
		a := b.action(h.Action)
		if a == nil {
			continue
		}
		if h.Owner != b.cfg.Owner && time.Now().Before(h.LeaseUntil) {
			continue
		}
		k := HeaderKey(h.Job, h.Action, h.Key)
		_, rev, err := getHeader(ctx, b.kv, k)
		if err != nil {
			continue
		}
		h.Owner, h.LeaseUntil = b.cfg.Owner, b.lease(a)
		data, _ := json.Marshal(h)
		if rev, err = b.kv.Update(ctx, k, data, rev); err != nil {
			continue // someone else got it
		}
		b.log.Info().Str("action", h.Action).Str("batch", h.Key).Str("provider_batch", h.ProviderID).Str("state", h.State).Msg("resuming batch")
		b.owned[h.Key] = &tracked{h: h, rev: rev, due: time.Now(), resumed: true}
	}
}

// save writes t's header (CAS on its revision, which renews the lease).
// False means the batch is no longer ours.
func (b *Batcher) save(ctx context.Context, t *tracked, a *workflow.Action) bool {
	t.h.Owner, t.h.LeaseUntil = b.cfg.Owner, b.lease(a)
	data, _ := json.Marshal(t.h)
	rev, err := b.kv.Update(ctx, HeaderKey(t.h.Job, t.h.Action, t.h.Key), data, t.rev)
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn().Err(err).Str("batch", t.h.Key).Msg("batch header not saved; leaving it to its new owner")
		}
		return false
	}
	t.rev = rev
	return true
}

// step advances one owned batch; false drops it from the owned set.
func (b *Batcher) step(ctx context.Context, t *tracked) bool {
	a := b.action(t.h.Action)
	if a == nil {
		return false
	}
	c, err := b.client(a)
	if err != nil {
		b.log.Error().Err(err).Str("batch", t.h.Key).Msg("batch has no client")
		return false
	}
	switch t.h.State {
	case StateSubmitting:
		return b.submit(ctx, t, a, c)
	default:
		return b.poll(ctx, t, a, c)
	}
}

func (b *Batcher) submit(ctx context.Context, t *tracked, a *workflow.Action, c Client) bool {
	h := t.h
	if h.Prev != "" {
		// A retry round waits for the batch it follows to be fully handled.
		if _, _, err := getHeader(ctx, b.kv, HeaderKey(h.Job, h.Action, h.Prev)); err == nil {
			t.due = time.Now().Add(a.Batch.Poll)
			return true
		}
	}
	if !b.save(ctx, t, a) {
		return false
	}
	// After a crash, or a submission that failed without an answer, the
	// provider may have the batch already: find it rather than pay twice.
	if t.resumed || h.SubmitAttempts > 0 {
		id, err := c.Find(ctx, h.Key)
		switch {
		case err == nil && id != "":
			b.log.Info().Str("batch", h.Key).Str("provider_batch", id).Msg("found the batch submitted before")
			return b.submitted(ctx, t, a, id)
		case err != nil && !errors.Is(err, ErrNoFind):
			return b.submitFailed(ctx, t, a, retry.AsError(err))
		}
	}
	var items []*Item
	var lines [][]byte
	var tokens []string
	for _, tok := range h.Tokens {
		ik := ItemKey(h.Job, h.Action, tok)
		it, rev, err := getItem(ctx, b.kv, ik)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return b.submitFailed(ctx, t, a, retry.AsError(err))
		}
		if it.Batch == h.Prev && h.Prev != "" {
			// The previous round died between creating this header and
			// moving its items: move them now.
			it.Batch, it.Round = h.Key, h.Round
			data, _ := json.Marshal(it)
			if _, err := b.kv.Update(ctx, ik, data, rev); err != nil {
				return b.submitFailed(ctx, t, a, retry.AsError(err))
			}
		}
		if it.Batch != h.Key {
			continue
		}
		items = append(items, it)
		lines = append(lines, it.Line)
		tokens = append(tokens, tok)
	}
	if len(items) == 0 {
		_ = b.kv.Delete(ctx, HeaderKey(h.Job, h.Action, h.Key))
		return false
	}
	h.Tokens = tokens
	id, err := c.Submit(ctx, h.Key, lines)
	if err != nil {
		if ctx.Err() != nil {
			return true // shutting down: resumed later
		}
		return b.submitFailed(ctx, t, a, retry.AsError(err))
	}
	b.log.Info().Str("action", a.Name).Str("batch", h.Key).Str("provider_batch", id).Int("records", len(items)).Int("round", h.Round).Msg("batch submitted")
	return b.submitted(ctx, t, a, id)
}

func (b *Batcher) submitted(ctx context.Context, t *tracked, a *workflow.Action, id string) bool {
	t.h.State, t.h.ProviderID, t.h.Submitted, t.h.LastError = StateSubmitted, id, time.Now().UTC(), ""
	t.h.Counts = Counts{Total: len(t.h.Tokens), Processing: len(t.h.Tokens)}
	if !b.save(context.WithoutCancel(ctx), t, a) {
		return false
	}
	t.due = time.Now().Add(a.Batch.Poll)
	return true
}

// submitFailed retries a transient failure later; a permanent one, or the
// last allowed attempt, fails every record of the batch.
func (b *Batcher) submitFailed(ctx context.Context, t *tracked, a *workflow.Action, e *retry.Error) bool {
	h := t.h
	h.SubmitAttempts++
	h.LastError = e.Error()
	b.log.Warn().Str("batch", h.Key).Int("attempt", h.SubmitAttempts).Msg("batch submission failed: " + e.Error())
	if !e.Class.Permanent() && h.SubmitAttempts < SubmitAttemptsMax {
		if !b.save(ctx, t, a) {
			return false
		}
		d := SubmitBackoff << (h.SubmitAttempts - 1)
		t.due = time.Now().Add(min(d, max(4*a.Batch.Poll, SubmitBackoff)))
		return true
	}
	entries := map[string]Entry{}
	for _, tok := range h.Tokens {
		entries[tok] = Entry{CustomID: tok, Err: e}
	}
	// Submission failures are not retried in rounds: they are the batch's,
	// not the records'.
	return b.finish(ctx, t, a, entries, false)
}

func (b *Batcher) poll(ctx context.Context, t *tracked, a *workflow.Action, c Client) bool {
	h := t.h
	st, err := c.Status(ctx, h.ProviderID)
	if err != nil {
		if ctx.Err() != nil {
			return true
		}
		e := retry.AsError(err)
		b.log.Warn().Str("batch", h.Key).Str("provider_batch", h.ProviderID).Msg("polling batch: " + e.Error())
		h.LastError = e.Error()
		if e.Class.Permanent() {
			// A batch the provider no longer knows (404), or a key revoked:
			// after a few polls that all say so, its records fail.
			h.PollErrors++
			if h.PollErrors >= SubmitAttemptsMax {
				entries := map[string]Entry{}
				for _, tok := range h.Tokens {
					entries[tok] = Entry{CustomID: tok, Err: e}
				}
				return b.finish(ctx, t, a, entries, false)
			}
		}
		t.due = time.Now().Add(a.Batch.Poll)
		return b.save(ctx, t, a)
	}
	h.PollErrors, h.LastError = 0, ""
	h.ProviderState, h.Counts, h.Polled = st.State, st.Counts, time.Now().UTC()
	if h.Counts.Total == 0 {
		h.Counts.Total = len(h.Tokens)
	}
	if !st.Ended {
		t.due = time.Now().Add(a.Batch.Poll)
		return b.save(ctx, t, a)
	}
	entries := map[string]Entry{}
	if st.Err != nil {
		for _, tok := range h.Tokens {
			entries[tok] = Entry{CustomID: tok, Err: st.Err}
		}
	} else {
		err := c.Results(ctx, st, func(e Entry) error {
			entries[e.CustomID] = e
			return nil
		})
		if err != nil {
			b.log.Warn().Str("batch", h.Key).Msg("reading batch results: " + err.Error())
			t.due = time.Now().Add(a.Batch.Poll)
			return b.save(ctx, t, a)
		}
	}
	for _, tok := range h.Tokens {
		if _, ok := entries[tok]; !ok {
			entries[tok] = Entry{CustomID: tok, NotReturned: true, State: "missing from the results"}
		}
		if e := entries[tok]; e.NotReturned && e.State == "" {
			e.State = st.State
			entries[tok] = e
		}
	}
	if !b.save(ctx, t, a) {
		return false
	}
	return b.finish(ctx, t, a, entries, true)
}

// finish gives every record of an ended batch its outcome: a result, a dead
// letter, the online path, or the next round. It is idempotent: items
// already handled are gone (or belong to another batch) and are skipped.
func (b *Batcher) finish(ctx context.Context, t *tracked, a *workflow.Action, entries map[string]Entry, rounds bool) bool {
	ctx = context.WithoutCancel(ctx) // a half-handled batch is resumed, but finish what is begun
	h := t.h
	type move struct {
		it  *Item
		rev uint64
	}
	var next []move
	var nextTokens []string
	pol := a.Retry
	failed := 0
	for _, tok := range h.Tokens {
		ik := ItemKey(h.Job, h.Action, tok)
		it, rev, err := getItem(ctx, b.kv, ik)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return b.retryFinish(t, a, err)
		}
		if it.Batch != h.Key {
			continue
		}
		e := entries[tok]
		var err2 error
		switch {
		case e.Err == nil && !e.NotReturned:
			err2 = b.cfg.Handler.Succeed(ctx, a, it, e.Response)
		default:
			final := e.Err
			reason := retry.ReasonExhausted
			if e.NotReturned {
				final = &retry.Error{Class: retry.ClassUnknown, TypeName: "BatchNotReturnedError", Provider: a.Provider, Model: a.Model,
					Message: fmt.Sprintf("batch %s (%s) returned no result for this record", cmp.Or(h.ProviderID, h.Key), e.State)}
				reason = retry.ReasonBatchNotReturned
			}
			it.FailRound(final.Class, final.Error())
			straggler := !final.Class.Permanent()
			// Every round a record was in is a call of it: max_calls caps
			// rounds as it caps online attempts (the online fallback counts
			// them too: Handler.Online).
			capped := a.MaxCalls > 0 && it.Round >= a.MaxCalls
			switch {
			case !straggler:
				dec := pol.Decide(retry.Outcome{Err: final}, pol.Deliveries())
				err2 = b.cfg.Handler.Fail(ctx, a, it, final, dec.Reason, retry.Diagnose(final, it.Attempts, it.Deliveries))
			case a.Fallback == workflow.ModeOnline:
				err2 = b.cfg.Handler.Online(ctx, a, it)
			case rounds && pol.Enabled && it.Round < pol.Attempts() && capped:
				err2 = b.cfg.Handler.Fail(ctx, a, it, final, retry.ReasonMaxCalls, retry.DiagnoseMaxCalls(a.MaxCalls, it.Attempts, it.Deliveries))
			case rounds && pol.Enabled && it.Round < pol.Attempts():
				next = append(next, move{it, rev})
				nextTokens = append(nextTokens, tok)
				continue
			default:
				err2 = b.cfg.Handler.Fail(ctx, a, it, final, reason, retry.Diagnose(final, it.Attempts, it.Deliveries))
			}
			failed++
		}
		if err2 != nil {
			return b.retryFinish(t, a, err2)
		}
		if err := b.kv.Delete(ctx, ik, jetstream.LastRevision(rev)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			b.log.Debug().Err(err).Str("item", ik).Msg("item not deleted")
		}
	}
	if len(next) > 0 {
		nk := nextKey(h.Key)
		nh := &Header{Key: nk, Job: h.Job, Action: h.Action, Provider: h.Provider, Kind: h.Kind, State: StateSubmitting,
			Round: h.Round + 1, Prev: h.Key, Tokens: nextTokens, Owner: b.cfg.Owner, LeaseUntil: b.lease(a), Created: time.Now().UTC()}
		data, _ := json.Marshal(nh)
		rev, err := b.kv.Create(ctx, HeaderKey(h.Job, h.Action, nk), data)
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return b.retryFinish(t, a, err)
		}
		for _, m := range next {
			m.it.Batch, m.it.Round = nk, m.it.Round+1
			data, _ := json.Marshal(m.it)
			if _, err := b.kv.Update(ctx, ItemKey(h.Job, h.Action, m.it.Token()), data, m.rev); err != nil {
				return b.retryFinish(t, a, err)
			}
		}
		if err != nil { // created by an earlier, interrupted finish
			nh, rev, err = getHeader(ctx, b.kv, HeaderKey(h.Job, h.Action, nk))
		}
		if err == nil {
			b.owned[nk] = &tracked{h: nh, rev: rev, due: time.Now().Add(a.Batch.Poll)}
		}
		b.log.Info().Str("action", a.Name).Str("batch", h.Key).Int("stragglers", len(next)).Int("round", nh.Round).Msg("stragglers go to a new batch round")
	}
	if err := b.kv.Delete(ctx, HeaderKey(h.Job, h.Action, h.Key)); err != nil {
		return b.retryFinish(t, a, err)
	}
	b.log.Info().Str("action", a.Name).Str("batch", h.Key).Str("provider_batch", h.ProviderID).Int("failed", failed).Msg("batch finished")
	return false
}

func (b *Batcher) retryFinish(t *tracked, a *workflow.Action, err error) bool {
	b.log.Warn().Err(err).Str("batch", t.h.Key).Msg("batch results not all written; will try again")
	t.due = time.Now().Add(a.Batch.Poll)
	return true
}
