package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
)

// Atomic batches (nats-server 2.12 and later, on a stream that allows
// them): the messages of a batch are stored whole or not at all, and acked
// once. What jetpool wants of them is their one fsync: on a server that
// syncs every write (sync_interval: always), each message published alone
// is a write and an fsync of its own, and a batch of hundreds is one. They
// cost more than single messages on a server that syncs on an interval
// (the server stages each batch in a file store of its own), so jetpool
// uses them only where every write is synced (Config.BatchWrites).

// Batch headers (the server's).
const (
	headerBatchID     = "Nats-Batch-Id"
	headerBatchSeq    = "Nats-Batch-Sequence"
	headerBatchCommit = "Nats-Batch-Commit"
)

// AtomicBatchMax is the most messages jetpool puts in one atomic batch (the
// server takes 1000 by default).
const AtomicBatchMax = 500

// Errors of PublishAtomic after which the caller publishes the batch's
// messages one by one (each is deduplicated by its Nats-Msg-Id, so one that
// was stored is not stored twice).
var (
	// ErrAtomicUnsupported is returned when the server or the stream does
	// not take atomic batches (an older server, or a stream that does not
	// allow them): nothing is known to be stored.
	ErrAtomicUnsupported = errors.New("atomic batch publish not supported here")
	// ErrAtomicDuplicate is returned when a message of the batch has a
	// Nats-Msg-Id the stream has stored already (a resumed dispatch): the
	// server refuses the whole batch.
	ErrAtomicDuplicate = errors.New("atomic batch holds a message already stored")
)

// PublishAtomic publishes msgs, all to one stream, as one atomic batch, and
// waits for the store's ack of the whole: nil means every message is
// stored. It sets the batch headers on msgs (ClearBatch takes them off, to
// publish a message alone).
func (b *Broker) PublishAtomic(ctx context.Context, msgs []*nats.Msg) error {
	if len(msgs) == 0 {
		return nil
	}
	id := strings.TrimPrefix(nats.NewInbox(), nats.InboxPrefix)
	for i, m := range msgs {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(headerBatchID, id)
		m.Header.Set(headerBatchSeq, strconv.Itoa(i+1))
		if i == len(msgs)-1 {
			break
		}
		if err := b.NC.PublishMsg(m); err != nil {
			return fmt.Errorf("publish batch %s: %w", id, err)
		}
	}
	last := msgs[len(msgs)-1]
	last.Header.Set(headerBatchCommit, "1")
	reply, err := b.NC.RequestMsgWithContext(ctx, last)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return ErrAtomicUnsupported
		}
		return fmt.Errorf("commit batch %s: %w", id, err)
	}
	var ack struct {
		Stream string `json:"stream"`
		Batch  string `json:"batch"`
		Count  int    `json:"count"`
		Error  *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return fmt.Errorf("commit batch %s: the store's answer %q: %w", id, reply.Data, err)
	}
	switch {
	case ack.Error != nil && ack.Error.ErrCode == 10201: // JSAtomicPublishContainsDuplicateMessageErr
		return ErrAtomicDuplicate
	case ack.Error != nil && ack.Error.ErrCode == 10174: // JSAtomicPublishDisabledErr
		return ErrAtomicUnsupported
	case ack.Error != nil:
		return fmt.Errorf("commit batch %s: %s (%d)", id, ack.Error.Description, ack.Error.ErrCode)
	case ack.Batch != id || ack.Count != len(msgs):
		// A server that does not know batches stored the commit as a
		// message of its own (and the others, unacknowledged, as theirs).
		return ErrAtomicUnsupported
	}
	return nil
}

// ClearBatch takes PublishAtomic's headers off m.
func ClearBatch(m *nats.Msg) {
	for _, h := range []string{headerBatchID, headerBatchSeq, headerBatchCommit} {
		m.Header.Del(h)
	}
}
