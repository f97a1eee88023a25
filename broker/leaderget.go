package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// leaderGetTimeout bounds a leader get whose context has no deadline.
const leaderGetTimeout = 5 * time.Second

// leaderLast reads the last message on subject (wildcards allowed) in
// stream from the stream's leader ($JS.API.STREAM.MSG.GET). It is what a
// lookup that decides whether to pay for a call must read: jetpool's streams
// allow direct gets, and a direct get is answered by any replica that is
// nearly caught up (nats-server enables a follower's direct gets at that point), so
// it can miss an outcome stored a moment ago, or all those a node frozen and
// thawed has not caught up with yet. Measured: TestChaosFrozenNode paid a
// record twice when a thawed replica answered its lookup. nil when the
// subject has no message.
func (b *Broker) leaderLast(ctx context.Context, stream, subject string) (*jetstream.RawStreamMsg, error) {
	return b.leaderGet(ctx, stream, msgGetRequest{LastFor: subject})
}

// leaderNext reads, from the stream's leader, the first message on subject
// (wildcards allowed) at or after sequence seq; nil when there is none.
func (b *Broker) leaderNext(ctx context.Context, stream, subject string, seq uint64) (*jetstream.RawStreamMsg, error) {
	return b.leaderGet(ctx, stream, msgGetRequest{Seq: seq, NextFor: subject})
}

// msgGetRequest is a $JS.API.STREAM.MSG.GET request.
type msgGetRequest struct {
	Seq     uint64 `json:"seq,omitempty"`
	LastFor string `json:"last_by_subj,omitempty"`
	NextFor string `json:"next_by_subj,omitempty"`
}

func (b *Broker) leaderGet(ctx context.Context, stream string, r msgGetRequest) (*jetstream.RawStreamMsg, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, leaderGetTimeout)
		defer cancel()
	}
	req, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	resp, err := b.NC.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, req)
	if err != nil {
		return nil, err
	}
	return parseMsgGet(stream, resp.Data)
}

// JetStream's error codes for "no message found", "stream not found" and
// "JetStream system temporarily unavailable" (a node back from a freeze,
// not caught up yet).
const (
	msgGetNotFound = 10037
	streamNotFound = 10059
	unavailable    = 10008
)

// errUnavailable is a get JetStream could not answer yet: asked again.
var errUnavailable = errors.New("JetStream temporarily unavailable")

// parseMsgGet reads a STREAM.MSG.GET response: the message, nil when there
// is none, or the API's error.
func parseMsgGet(stream string, data []byte) (*jetstream.RawStreamMsg, error) {
	var r struct {
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Message *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("stream %s: get: %w", stream, err)
	}
	if r.Error != nil {
		switch r.Error.ErrCode {
		case msgGetNotFound:
			return nil, nil
		case streamNotFound:
			return nil, fmt.Errorf("stream %s: get: %w", stream, jetstream.ErrStreamNotFound)
		case unavailable:
			return nil, fmt.Errorf("stream %s: get: %w (%s)", stream, errUnavailable, r.Error.Description)
		}
		return nil, fmt.Errorf("stream %s: get: %s (code %d, error %d)", stream, r.Error.Description, r.Error.Code, r.Error.ErrCode)
	}
	if r.Message == nil {
		return nil, fmt.Errorf("stream %s: get: an answer with neither a message nor an error", stream)
	}
	m := &jetstream.RawStreamMsg{Subject: r.Message.Subject, Sequence: r.Message.Sequence, Data: r.Message.Data, Time: r.Message.Time}
	if len(r.Message.Header) > 0 {
		h, err := nats.DecodeHeadersMsg(r.Message.Header)
		if err != nil {
			return nil, fmt.Errorf("stream %s: get: headers of %d: %w", stream, m.Sequence, err)
		}
		m.Header = h
	}
	return m, nil
}

// kvLast reads key's entry in bucket from the bucket's leader, as LastMsg
// does; nil when there is none or it was deleted or purged. Its Sequence
// is the entry's revision.
func (b *Broker) kvLast(ctx context.Context, bucket, key string) (*jetstream.RawStreamMsg, error) {
	m, err := b.LastMsg(ctx, "KV_"+bucket, "$KV."+bucket+"."+key)
	if err != nil || m == nil {
		return nil, err
	}
	if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
		return nil, nil
	}
	return m, nil
}
