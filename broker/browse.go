package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
)

// StoredMsg is one message of a stream as a browser shows it: its sequence
// and subject, and its body as stored.
type StoredMsg struct {
	Seq     uint64          `json:"seq"`
	Subject string          `json:"subject"`
	Data    json.RawMessage `json:"data"`
}

// BrowseMax bounds one page of Browse.
const BrowseMax = 500

// Browse returns up to limit (at most BrowseMax) messages of stream matching
// filter, oldest first, from sequence after+1 on; next is the sequence to
// pass as after for the page that follows (0 when there is none). It reads
// with an ordered consumer and stops at the page's end: a page costs what
// it holds, whatever the size of the stream. The work stream, whose
// work-queue retention allows no second consumer, cannot be browsed.
func (b *Broker) Browse(ctx context.Context, stream, filter string, after uint64, limit int) (page []StoredMsg, next uint64, err error) {
	if limit <= 0 || limit > BrowseMax {
		limit = BrowseMax
	}
	cc := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, InactiveThreshold: 10 * time.Second}
	if after > 0 {
		cc.DeliverPolicy, cc.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	c, err := b.JS.OrderedConsumer(ctx, stream, cc)
	if err != nil {
		return nil, 0, fmt.Errorf("browse %s %s: %w", stream, filter, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("browse %s %s: %w", stream, filter, err)
	}
	if info.NumPending == 0 {
		return nil, 0, nil
	}
	// Asking for no more than are pending, the fetch returns once they
	// have come instead of waiting out its MaxWait for more.
	batch, err := c.Fetch(int(min(uint64(limit), info.NumPending)), jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return nil, 0, fmt.Errorf("browse %s %s: %w", stream, filter, err)
	}
	var pending uint64
	for m := range batch.Messages() {
		meta, err := m.Metadata()
		if err != nil {
			return page, 0, err
		}
		page = append(page, StoredMsg{Seq: meta.Sequence.Stream, Subject: m.Subject(), Data: m.Data()})
		pending = meta.NumPending
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return page, 0, fmt.Errorf("browse %s %s: %w", stream, filter, err)
	}
	if pending > 0 && len(page) > 0 {
		next = page[len(page)-1].Seq
	}
	return page, next, nil
}

// RecordFilter matches every result of one record of a job, all actions and
// outcomes.
func RecordFilter(job, record string) string {
	return "jetpool.results." + job + ".*.*." + RecordToken(record)
}

// ActionCounts is one action's share of a job.
type ActionCounts struct {
	Action string `json:"action"`
	OK     uint64 `json:"ok"`     // results ok at this action
	Failed uint64 `json:"failed"` // records that failed at this action
	// Cancelled is the records a cancel ended at this action.
	Cancelled uint64 `json:"cancelled,omitempty"`
	// Queued is the action's messages in the work stream: not yet
	// delivered, in flight or waiting for redelivery.
	Queued uint64 `json:"queued"`
}

// JobActionCounts counts each action of j: results by outcome and the work
// stream's messages, each a server-side count (O(subjects) in the server,
// nothing crosses the wire). Three requests an action: for a job's own page,
// not for a list of jobs.
func (b *Broker) JobActionCounts(ctx context.Context, j *Job) ([]ActionCounts, error) {
	out := make([]ActionCounts, 0, len(j.Actions))
	for _, a := range j.Actions {
		c := ActionCounts{Action: a}
		var err error
		if c.OK, err = b.Count(ctx, StreamResults, ResultFilter(j.ID, a, OutcomeOK)); err != nil {
			return nil, err
		}
		var failed []string
		for _, r := range failureOutcomes {
			if r != string(retry.ReasonCancelled) {
				failed = append(failed, ResultFilter(j.ID, a, r))
			}
		}
		if c.Failed, err = b.countFiltered(ctx, StreamResults, failed...); err != nil {
			return nil, err
		}
		if c.Cancelled, err = b.Count(ctx, StreamResults, ResultFilter(j.ID, a, string(retry.ReasonCancelled))); err != nil {
			return nil, err
		}
		if c.Queued, err = b.Count(ctx, StreamWork, WorkSubject(j.ID, a)); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}
