package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// BenchmarkFloorAlways is the raw engine's ceiling for jetpool's storage
// work when the server syncs every write (sync_interval: always), for the
// two choices that bound it (the fsync target):
//
//   - the work stream's retention: a work-queue stream (the design's) removes
//     each message on its ack, and the file store writes and syncs each
//     removal's tombstone alone; a limits stream removes nothing on an ack
//     (the consumer's ack floor is its own state, written about ten times a
//     second);
//   - the results: each published alone (one fsync each), or a group commit
//     (the results waiting while a batch is stored go in the next atomic
//     batch, one fsync a batch; each work message is acked once its batch is
//     stored).
//
// No jetpool code runs: bare nats.go on one embedded server with a temp
// store, the same disk as `JETPOOL_SYNC_INTERVAL=always jetpool run`.
//
//	go test ./internal/bench -run '^$' -bench FloorAlways -benchtime 2x
//
// JETPOOL_BENCH_RECORDS sets the records (default 20,000 of 1 KiB).
func BenchmarkFloorAlways(b *testing.B) {
	n := benchRecords(20000)
	for _, retention := range []jetstream.RetentionPolicy{jetstream.WorkQueuePolicy, jetstream.LimitsPolicy} {
		for _, batched := range []bool{false, true} {
			name := "workqueue"
			if retention == jetstream.LimitsPolicy {
				name = "limits"
			}
			results := "single"
			if batched {
				results = "batched"
			}
			b.Run(name+"/"+results, func(b *testing.B) {
				br := testenv.Broker(b, testenv.Options{SyncInterval: "always"})
				var rates []float64
				for i := 0; b.Loop(); i++ {
					rate, err := floorAlways(b.Context(), br, i, n, retention, batched)
					if err != nil {
						b.Fatal(err)
					}
					rates = append(rates, rate)
				}
				b.ReportMetric(medianOf(rates), "rec/s")
			})
		}
	}
}

// floorAlways fills a work stream of the given retention with n messages of
// 1 KiB (in atomic batches), then consumes them all, storing one result
// each (alone, or group-committed when batched) and acking each work
// message once its result is stored. It returns the consume rate.
func floorAlways(ctx context.Context, b *broker.Broker, round, n int, retention jetstream.RetentionPolicy, batched bool) (float64, error) {
	work, res := fmt.Sprintf("ALWAYSWQ%d", round), fmt.Sprintf("ALWAYSRES%d", round)
	ws, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: work, Subjects: []string{work + ".>"},
		Retention: retention, Storage: jetstream.FileStorage, AllowAtomicPublish: true})
	if err != nil {
		return 0, err
	}
	defer func() { _ = b.JS.DeleteStream(context.WithoutCancel(ctx), work) }()
	if _, err := b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: res, Subjects: []string{res + ".>"},
		MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage, AllowAtomicPublish: true}); err != nil {
		return 0, err
	}
	defer func() { _ = b.JS.DeleteStream(context.WithoutCancel(ctx), res) }()
	payload := make([]byte, 1024)
	for i := 0; i < n; i += broker.AtomicBatchMax {
		var msgs []*nats.Msg
		for j := i; j < min(n, i+broker.AtomicBatchMax); j++ {
			m := nats.NewMsg(work + ".x")
			m.Data = payload
			msgs = append(msgs, m)
		}
		if err := b.PublishAtomic(ctx, msgs); err != nil {
			return 0, err
		}
	}
	// A window of unacked records smaller than the job, as a worker's
	// slots are: with every record of the stream delivered at once (a
	// window of n), the work-queue stream's removals were measured to cost
	// far less, a case no job of more records than its window meets.
	ccfg := jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: min(n/2, 1000)}
	c, err := ws.CreateOrUpdateConsumer(ctx, ccfg)
	if err != nil {
		return 0, err
	}
	got := make(chan jetstream.Msg, 4096)
	var done atomic.Int64
	finished := make(chan struct{})
	finish := func(k int) {
		if done.Add(int64(k)) == int64(n) {
			close(finished)
		}
	}
	result := func(m jetstream.Msg) *nats.Msg {
		r := nats.NewMsg(res + ".r" + strconv.FormatUint(seqOf(m), 10))
		r.Data = floorResult
		return r
	}
	stop := make(chan struct{})
	defer close(stop)
	if batched {
		// One committer: it takes every message waiting (at most a batch),
		// stores their results as one atomic batch, then acks them.
		go func() {
			for {
				var ms []jetstream.Msg
				select {
				case m := <-got:
					ms = append(ms, m)
				case <-stop:
					return
				}
			more:
				for len(ms) < broker.AtomicBatchMax {
					select {
					case m := <-got:
						ms = append(ms, m)
					default:
						break more
					}
				}
				rs := make([]*nats.Msg, len(ms))
				for i, m := range ms {
					rs[i] = result(m)
				}
				if err := b.PublishAtomic(ctx, rs); err != nil {
					continue // not acked: redelivered after AckWait
				}
				for _, m := range ms {
					_ = m.Ack()
				}
				finish(len(ms))
			}
		}()
	} else {
		// The raw floor: each result published alone, its work message
		// acked once the store has it, in the order published.
		pending := make(chan floorPending, 4096)
		go func() {
			for {
				select {
				case m := <-got:
					f, err := b.JS.PublishMsgAsync(result(m))
					if err != nil {
						continue
					}
					pending <- floorPending{m, f}
				case <-stop:
					return
				}
			}
		}()
		go func() {
			for {
				select {
				case p := <-pending:
					select {
					case <-p.f.Ok():
						_ = p.msg.Ack()
						finish(1)
					case <-p.f.Err():
					}
				case <-stop:
					return
				}
			}
		}()
	}
	start := time.Now()
	cc, err := c.Consume(func(m jetstream.Msg) { got <- m }, rawPullOpts...)
	if err != nil {
		return 0, err
	}
	defer cc.Stop()
	select {
	case <-finished:
		return float64(n) / time.Since(start).Seconds(), nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("%d of %d consumed in 5 minutes", done.Load(), n)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
