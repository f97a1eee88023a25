package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The plain program a user would write for the same job without jetpool:
// pull a record from a work-queue stream, "call" a zero-latency model that
// answers as jetpool's sim does (it echoes the prompt), store the answer
// (waiting for the store's ack), ack the record. Nothing else: no retries,
// no accounting, no claims.
const (
	loopWork    = "LOOPWORK"
	loopResults = "LOOPRES"
)

type loopRecord struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

type loopResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Output string `json:"output"`
	Usage  struct {
		Input  int `json:"input_tokens"`
		Output int `json:"output_tokens"`
	} `json:"usage"`
}

// sharedShape shapes the loop's work stream as jetpool's (the side
// loop:shared): one stream for every job and action under a wildcard, each
// job read by a consumer filtered to its subjects. The server then does more
// per ack: a work-queue stream with a wildcard loads each acked message to
// learn its subject, and matches it against every consumer's filter, before
// it removes it. The plain loop's stream has one literal subject.
var sharedShape bool

// loopWorkSubject is the subject the loop's records are queued on.
func loopWorkSubject() string {
	if sharedShape {
		return "loop.work.job1.act"
	}
	return "loop.work"
}

// loopStreams makes the loop's two streams: work (an ack removes the
// record) and results (one per record).
func loopStreams(ctx context.Context, js jetstream.JetStream) (jetstream.Stream, error) {
	subject := "loop.work"
	if sharedShape {
		subject = "loop.work.>"
	}
	work, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: loopWork, Subjects: []string{subject}, Retention: jetstream.WorkQueuePolicy,
	})
	if err != nil {
		return nil, err
	}
	_, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: loopResults, Subjects: []string{"loop.res.>"}, MaxMsgsPerSubject: 1,
	})
	return work, err
}

// runLoop is the plain program: conc goroutines fed by one Consume, until n
// records are done or SIGTERM.
func runLoop(url string, conc, n int) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	work, err := loopStreams(ctx, js)
	if err != nil {
		return err
	}
	cfg := jetstream.ConsumerConfig{
		Durable: "loop", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, MaxAckPending: 20000,
	}
	if sharedShape {
		cfg.FilterSubject = "loop.work.job1.>"
	}
	c, err := work.CreateOrUpdateConsumer(ctx, cfg)
	if err != nil {
		return err
	}
	msgs := make(chan jetstream.Msg, conc)
	var done atomic.Int64
	finished := make(chan struct{})
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range msgs {
				if handle(ctx, js, m) == nil && done.Add(1) == int64(n) {
					close(finished)
				}
			}
		}()
	}
	cc, err := c.Consume(func(m jetstream.Msg) { msgs <- m })
	if err != nil {
		return err
	}
	select {
	case <-finished:
	case <-ctx.Done():
	}
	cc.Stop()
	close(msgs)
	wg.Wait()
	return nil
}

func handle(ctx context.Context, js jetstream.JetStream, m jetstream.Msg) error {
	var rec loopRecord
	if err := json.Unmarshal(m.Data(), &rec); err != nil {
		_ = m.Term()
		return err
	}
	prompt := "do " + rec.Text
	res := loopResult{ID: rec.ID, Status: "ok", Output: "sim reply to: " + prompt}
	res.Usage.Input, res.Usage.Output = len(prompt)/4, len(res.Output)/4
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if _, err := js.Publish(ctx, "loop.res."+rec.ID, b); err != nil {
		return fmt.Errorf("store %s: %w", rec.ID, err) // not acked: redelivered
	}
	return m.Ack()
}
