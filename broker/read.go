package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// ReadStream calls fn for every message of stream on the subjects filter
// names, oldest first, with an ordered consumer (constant memory), until fn
// says stop or returns an error. It reads what the stream holds when it
// starts. A start JetStream cannot answer yet (a node just back from a
// freeze answers "temporarily unavailable" for a few seconds) is asked
// again; a read that stalls — its consumer was placed on a node that went
// away or fell behind, and nats.go would wait for ever — goes on from the
// last message read, on a new consumer (readStallsMax times).
func (b *Broker) ReadStream(ctx context.Context, stream string, filter []string, fn func(jetstream.Msg) (stop bool, err error)) error {
	var from uint64 // the next stream sequence to read; 0: from the start
	// What the leader holds as the read starts: a read that ends before
	// its last message on filter is checked (readAll).
	leader := b.leaderView(stream)
	info, err := leader.get(ctx, readStartWait)
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	last := info.State.LastSeq
	for stalls := 0; ; stalls++ {
		next, stopped, err := b.readFrom(ctx, leader, filter, from, fn)
		if err == nil && !stopped {
			// The consumer had no more; the leader may have (a consumer
			// made again mid-read lands on any member, one behind too).
			err = b.readAll(ctx, stream, filter, max(next, from, 1), last)
		}
		if !errors.Is(err, errStalled) || stalls >= readStallsMax || ctx.Err() != nil {
			return err
		}
		from = next
		leader.forget()
	}
}

// readAll returns errStalled when the stream's leader holds a message on
// filter between sequences next and last, which a read that ended before
// next missed.
func (b *Broker) readAll(ctx context.Context, stream string, filter []string, next, last uint64) error {
	if next > last {
		return nil
	}
	if len(filter) == 0 {
		filter = []string{">"}
	}
	for _, f := range filter {
		var m *jetstream.RawStreamMsg
		if _, err := askLeader(ctx, stream, func() (err error) {
			m, err = b.leaderNext(ctx, stream, f, next)
			return err
		}); err != nil {
			return fmt.Errorf("%w: the leader of %s did not say whether the read is whole: %w", errStalled, stream, err)
		}
		if m != nil && m.Sequence <= last {
			return fmt.Errorf("%w: the leader of %s holds %s at sequence %d, which the read ended before", errStalled, stream, f, m.Sequence)
		}
	}
	return nil
}

// readStall is how long ReadStream waits for the next of the messages it
// was told are there before it reads on from a new consumer; readStallsMax
// how many times it does so; readStartWait how long it retries a start
// JetStream cannot answer.
var (
	readStall     = 10 * time.Second
	readStallsMax = 5
	readStartWait = 15 * time.Second
)

// errStalled is a read whose next message did not come.
var errStalled = errors.New("the read stalled")

// readFrom is ReadStream from stream sequence from (0: the first): it
// returns the sequence to go on from, and whether fn stopped the read.
func (b *Broker) readFrom(ctx context.Context, leader *leaderView, filter []string, from uint64, fn func(jetstream.Msg) (bool, error)) (next uint64, stopped bool, err error) {
	stream := leader.stream
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filter}
	if from > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	var (
		c    jetstream.Consumer
		info *jetstream.ConsumerInfo
	)
	for try := 1; ; try++ {
		_, err := untilAnswered(ctx, readStartWait, 50*time.Millisecond, time.Second, notReady, func() {}, func() (err error) {
			if c, err = b.JS.OrderedConsumer(ctx, stream, cfg); err != nil {
				return err
			}
			info, err = c.Info(ctx)
			return err
		})
		if err != nil {
			return from, false, err
		}
		// On a member whose copy is behind, the read would end short
		// (broker/current.go): made again, on the leader.
		if try >= placeTries || leader.onLeader(ctx, info) {
			break
		}
		_ = b.JS.DeleteConsumer(ctx, stream, info.Name)
		if err := placePause(ctx, try+1); err != nil {
			return from, false, err
		}
	}
	if info.NumPending == 0 {
		return from, false, nil
	}
	it, err := c.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return from, false, err
	}
	defer it.Stop()
	for n := uint64(0); n < info.NumPending; n++ {
		nctx, cancel := context.WithTimeout(ctx, readStall)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return from, false, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return from, false, fmt.Errorf("%w after %d of %d messages of %s (none for %s)", errStalled, n, info.NumPending, stream, readStall)
		default:
			return from, false, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return from, false, err
		}
		if stop, err := fn(msg); err != nil || stop {
			return from, stop, err
		}
		from = meta.Sequence.Stream + 1
		if meta.NumPending == 0 {
			break
		}
	}
	return from, false, nil
}
