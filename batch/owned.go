package batch

// An owned batch's life, from the moment its group is recorded: claimed
// (scan), submitted (or found submitted before), polled until it ends, its
// header saved at each step, which renews the lease. finish.go maps an
// ended batch's results back.

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

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
	h := &Header{Key: key, Job: b.cfg.Job, Action: a.Name, Provider: a.Provider, Deployment: b.cfg.Deployment(a), Kind: g.limitsKind(b), State: StateSubmitting,
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
	if c, err := b.client(g.action, ""); err == nil {
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
	c, err := b.client(a, t.h.Deployment) // deployments.go
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
