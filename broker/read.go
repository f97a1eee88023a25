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
	for stalls := 0; ; stalls++ {
		next, err := b.readFrom(ctx, stream, filter, from, fn)
		if !errors.Is(err, errStalled) || stalls >= readStallsMax || ctx.Err() != nil {
			return err
		}
		from = next
	}
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
// returns the sequence to go on from when the read stalls.
func (b *Broker) readFrom(ctx context.Context, stream string, filter []string, from uint64, fn func(jetstream.Msg) (bool, error)) (uint64, error) {
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
			return from, err
		}
		// On a member whose copy is behind, the read would end short
		// (broker/current.go): made again, elsewhere.
		if try >= placeTries || b.onCurrentMember(ctx, stream, info) {
			break
		}
		_ = b.JS.DeleteConsumer(ctx, stream, info.Name)
	}
	if info.NumPending == 0 {
		return from, nil
	}
	it, err := c.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return from, err
	}
	defer it.Stop()
	for n := uint64(0); n < info.NumPending; n++ {
		nctx, cancel := context.WithTimeout(ctx, readStall)
		msg, err := it.Next(jetstream.NextContext(nctx))
		cancel()
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return from, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			return from, fmt.Errorf("%w after %d of %d messages of %s (none for %s)", errStalled, n, info.NumPending, stream, readStall)
		default:
			return from, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return from, err
		}
		if stop, err := fn(msg); err != nil || stop {
			return from, err
		}
		from = meta.Sequence.Stream + 1
		if meta.NumPending == 0 {
			break
		}
	}
	return from, nil
}
