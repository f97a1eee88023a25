package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/tracing"
)

// Catcher moves records that reached the work consumer's MaxDeliver (a worker
// died on them every time) to the DLQ with reason max_deliveries. It reads
// the MAX_DELIVERIES advisories from a work-queue stream through one durable
// consumer, so with many processes running a catcher each advisory is handled
// by exactly one of them, and one that restarts loses nothing.
type Catcher struct {
	B   *broker.Broker
	Log zerolog.Logger

	mu sync.Mutex
	cc jetstream.ConsumeContext
}

type maxDeliverAdvisory struct {
	Type       string `json:"type"`
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries"`
}

// Start begins consuming advisories. Stop ends it.
func (c *Catcher) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cc != nil {
		return nil
	}
	cons, err := c.B.JS.Consumer(ctx, broker.StreamAdvisories, broker.ConsumerMaxDeliveries)
	if err != nil {
		return fmt.Errorf("catcher: %w", err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		hctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.handle(hctx, m); err != nil {
			c.Log.Error().Err(err).Msg("poison-pill catcher: will retry")
			_ = m.NakWithDelay(2 * time.Second)
			return
		}
		_ = m.Ack()
	}, jetstream.PullMaxMessages(16))
	if err != nil {
		return fmt.Errorf("catcher: %w", err)
	}
	c.cc = cc
	return nil
}

// Stop stops consuming; an advisory being handled finishes first.
func (c *Catcher) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cc != nil {
		c.cc.Drain()
		<-c.cc.Closed()
		c.cc = nil
	}
}

func (c *Catcher) handle(ctx context.Context, m jetstream.Msg) error {
	var a maxDeliverAdvisory
	if err := json.Unmarshal(m.Data(), &a); err != nil {
		c.Log.Warn().Err(err).Msg("poison-pill catcher: unreadable advisory dropped")
		return nil
	}
	if a.Stream != broker.StreamWork {
		return nil
	}
	s, err := c.B.Stream(ctx, broker.StreamWork)
	if err != nil {
		return err
	}
	raw, err := s.GetMsg(ctx, a.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil // acked or already moved
	}
	if err != nil {
		return err
	}
	parts := broker.SubjectParts(raw.Subject)
	if len(parts) < 2 {
		return nil
	}
	job, action := parts[0], parts[1]
	record := raw.Header.Get(broker.HeaderRecord)
	replays := 0
	fmt.Sscan(raw.Header.Get(broker.HeaderReplays), &replays)
	msg := fmt.Sprintf("failed permanently: PoisonRecord: no worker acked or nak'ed it in %d deliveries (the worker died or hung each time)", a.Deliveries)
	e := &Entry{
		Job: job, Action: action, Record: record, Reason: retry.ReasonMaxDeliveries, Class: retry.ClassProgramming,
		Error: msg, Deliveries: int(a.Deliveries), Replays: replays, FailedAt: time.Now().UTC(), Data: raw.Data,
		Trace: tracing.Traceparent(nil, raw.Header),
	}
	if err := Publish(ctx, c.B, e); err != nil {
		return err
	}
	if err := c.B.WriteResult(ctx, &broker.Result{
		ID: record, Status: broker.StatusFailed, Reason: string(retry.ReasonMaxDeliveries), Action: action, Job: job,
		Error:    &broker.ResultError{Class: string(retry.ClassProgramming), Message: msg},
		Recovery: broker.Recovery{Deliveries: int(a.Deliveries)}, Replays: replays, Finished: e.FailedAt,
	}); err != nil {
		return err
	}
	c.Log.Warn().Str("job", job).Str("action", action).Str("record", record).Uint64("deliveries", a.Deliveries).
		Msg("poison record moved to the DLQ (max_deliveries)")
	return c.B.DeleteMsg(ctx, broker.StreamWork, a.StreamSeq)
}
