package batch

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// fate is what finish did with one record of an ended batch.
type fate int

const (
	fateOK        fate = iota // its ok result written
	fateFailed                // failed in the batch: dead-lettered, or sent online
	fateNextRound             // a straggler, for the batch's next round
)

// straggler is a record for the next round, with its item's revision.
type straggler struct {
	it    *Item
	rev   uint64
	token string
}

// finish gives every record of an ended batch its outcome: a result, a dead
// letter, the online path, or the next round. It is idempotent: items
// already handled are gone (or belong to another batch) and are skipped.
func (b *Batcher) finish(ctx context.Context, t *tracked, a *workflow.Action, entries map[string]Entry, rounds bool) bool {
	ctx = context.WithoutCancel(ctx) // a half-handled batch is resumed, but finish what is begun
	h := t.h
	var next []straggler
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
		f, err := b.settle(ctx, h, a, it, entries[tok], rounds)
		if err != nil {
			return b.retryFinish(t, a, err)
		}
		switch f {
		case fateNextRound:
			next = append(next, straggler{it, rev, tok})
			continue
		case fateFailed:
			failed++
		}
		if err := b.kv.Delete(ctx, ik, jetstream.LastRevision(rev)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			b.log.Debug().Err(err).Str("item", ik).Msg("item not deleted")
		}
	}
	if len(next) > 0 {
		if err := b.nextRound(ctx, h, a, next); err != nil {
			return b.retryFinish(t, a, err)
		}
	}
	if err := b.kv.Delete(ctx, HeaderKey(h.Job, h.Action, h.Key)); err != nil {
		return b.retryFinish(t, a, err)
	}
	b.log.Info().Str("action", a.Name).Str("batch", h.Key).Str("provider_batch", h.ProviderID).Int("failed", failed).Msg("batch finished")
	return false
}

// settle gives one record of batch h its outcome from its entry e: its ok
// result, its dead letter, the online path, or (rounds, a transient failure
// with attempts left) the next round. An error leaves the record to a later
// finish.
func (b *Batcher) settle(ctx context.Context, h *Header, a *workflow.Action, it *Item, e Entry, rounds bool) (fate, error) {
	it.Deployment = h.Deployment
	if e.Err == nil && !e.NotReturned {
		return fateOK, b.cfg.Handler.Succeed(ctx, a, it, e.Response)
	}
	pol := a.Retry
	final := e.Err
	reason := retry.ReasonExhausted
	if e.NotReturned {
		final = &retry.Error{Class: retry.ClassUnknown, TypeName: "BatchNotReturnedError", Provider: a.Provider, Model: a.Model,
			Message: fmt.Sprintf("batch %s (%s) returned no result for this record", cmp.Or(h.ProviderID, h.Key), e.State)}
		reason = retry.ReasonBatchNotReturned
	}
	it.FailRound(final.Class, final.Error())
	transient := !final.Class.Permanent()
	// Every round a record was in is a call of it: max_calls caps rounds as
	// it caps online attempts (the online fallback counts them too:
	// Handler.Online).
	capped := a.MaxCalls > 0 && it.Round >= a.MaxCalls
	switch {
	case !transient:
		dec := pol.Decide(retry.Outcome{Err: final}, pol.Deliveries())
		return fateFailed, b.cfg.Handler.Fail(ctx, a, it, final, dec.Reason, retry.Diagnose(final, it.Attempts, it.Deliveries))
	case a.Fallback == workflow.ModeOnline:
		return fateFailed, b.cfg.Handler.Online(ctx, a, it)
	case rounds && pol.Enabled && it.Round < pol.Attempts() && capped:
		return fateFailed, b.cfg.Handler.Fail(ctx, a, it, final, retry.ReasonMaxCalls, retry.DiagnoseMaxCalls(a.MaxCalls, it.Attempts, it.Deliveries))
	case rounds && pol.Enabled && it.Round < pol.Attempts():
		return fateNextRound, nil
	default:
		return fateFailed, b.cfg.Handler.Fail(ctx, a, it, final, reason, retry.Diagnose(final, it.Attempts, it.Deliveries))
	}
}

// nextRound records batch h's stragglers as its next round: a new header
// (Prev: h), then each item moved to it, and owns it. A header that exists
// already was created by an earlier, interrupted finish: the items are moved
// to it.
func (b *Batcher) nextRound(ctx context.Context, h *Header, a *workflow.Action, next []straggler) error {
	nk := nextKey(h.Key)
	tokens := make([]string, len(next))
	for i, s := range next {
		tokens[i] = s.token
	}
	nh := &Header{Key: nk, Job: h.Job, Action: h.Action, Provider: h.Provider, Deployment: b.cfg.Deployment(a), Kind: h.Kind, State: StateSubmitting,
		Round: h.Round + 1, Prev: h.Key, Tokens: tokens, Owner: b.cfg.Owner, LeaseUntil: b.lease(a), Created: time.Now().UTC()}
	data, _ := json.Marshal(nh)
	rev, err := b.kv.Create(ctx, HeaderKey(h.Job, h.Action, nk), data)
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		return err
	}
	for _, s := range next {
		s.it.Batch, s.it.Round = nk, s.it.Round+1
		data, _ := json.Marshal(s.it)
		if _, err := b.kv.Update(ctx, ItemKey(h.Job, h.Action, s.it.Token()), data, s.rev); err != nil {
			return err
		}
	}
	if err != nil { // created by an earlier, interrupted finish
		nh, rev, err = getHeader(ctx, b.kv, HeaderKey(h.Job, h.Action, nk))
	}
	if err == nil { // else a later scan claims it
		b.owned[nk] = &tracked{h: nh, rev: rev, due: time.Now().Add(a.Batch.Poll)}
	}
	b.log.Info().Str("action", a.Name).Str("batch", h.Key).Int("stragglers", len(next)).Int("round", h.Round+1).Msg("stragglers go to a new batch round")
	return nil
}

// retryFinish leaves an ended batch to the next poll, when a result, a dead
// letter or a KV write failed.
func (b *Batcher) retryFinish(t *tracked, a *workflow.Action, err error) bool {
	b.log.Warn().Err(err).Str("batch", t.h.Key).Msg("batch results not all written; will try again")
	t.due = time.Now().Add(a.Batch.Poll)
	return true
}
