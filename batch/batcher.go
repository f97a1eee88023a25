package batch

import (
	"cmp"
	"context"
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
	// Client builds the batch client of an action's provider, or of its
	// deployment called deployment ("": the provider itself); NewClient
	// of its configuration by default (deployments.go).
	Client func(a *workflow.Action, deployment string) (Client, error)
	// Deployment picks the deployment of the action's provider that a new
	// batch goes to ("" for a provider without deployments); by default
	// each in turn (deployments.go).
	Deployment func(a *workflow.Action) string
	Handler    Handler
	Log        zerolog.Logger
	Heartbeat  time.Duration // HeartbeatDefault
	Lease      time.Duration // LeaseDefault (at least 3 polls of the action)
}

// Pending is a work message handed to the batcher.
type Pending struct {
	Msg     jetstream.Msg
	Action  *workflow.Action
	Item    Item // ID, Data, Replays, Deliveries
	Request provider.Request
	// Embed, when set, is the record's embeddings request (an embed
	// action), sent instead of Request.
	Embed *provider.EmbedRequest
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
	clients map[string]Client // by provider, or provider/deployment
	turns   map[string]int    // the default Deployment's rotation, by provider
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
	b := &Batcher{cfg: cfg, log: cfg.Log.With().Str("job", cfg.Job).Logger(), clients: map[string]Client{},
		turns: map[string]int{}, open: map[string]*group{}, owned: map[string]*tracked{}, kick: make(chan struct{}, 1)}
	if b.cfg.Client == nil {
		b.cfg.Client = b.endpointClient // deployments.go
	}
	if b.cfg.Deployment == nil {
		b.cfg.Deployment = b.inTurn
	}
	return b
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

// Add takes a work message for its action's next batch. The message stays
// unacked (with InProgress heartbeats) until the batch is recorded in KV,
// then it is acked. A record already recorded in a batch is acked at once.
// An error wrapping ErrNoClient is the action's fault; any other error
// leaves the message to the caller (nak it).
func (b *Batcher) Add(ctx context.Context, p Pending) error {
	a := p.Action
	c, err := b.client(a, "") // every deployment's lines are the provider's
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
	line, err := lineOf(c, token, p)
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

// lineOf is p's line of a batch: a chat request, or an embeddings request
// where the client makes them.
func lineOf(c Client, token string, p Pending) ([]byte, error) {
	if p.Embed == nil {
		return c.Line(token, p.Request)
	}
	ec, ok := c.(EmbedClient)
	if !ok {
		return nil, fmt.Errorf("provider %s (kind %s) has no embeddings batch API: use mode: online", p.Action.Provider, c.Kind())
	}
	return ec.EmbedLine(token, *p.Embed)
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
