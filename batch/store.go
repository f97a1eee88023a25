package batch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// States of a Header. Ended batches are not kept: once every record of a
// batch has its outcome, its header is deleted.
const (
	// StateSubmitting: the batch is recorded (its records are in KV and
	// their work messages acked) but the provider has not (knowingly)
	// created it yet.
	StateSubmitting = "submitting"
	// StateSubmitted: the provider has the batch; ProviderID is set.
	StateSubmitted = "submitted"
)

// Header is one batch, as kept in the JETPOOL_BATCHES bucket under
// batch.<job>.<action>.<key>. It is what `jetpool status` shows.
type Header struct {
	Key      string `json:"key"` // jetpool's deterministic batch key
	Job      string `json:"job"`
	Action   string `json:"action"`
	Provider string `json:"provider"`
	// Deployment is the provider's deployment the batch is submitted to,
	// polled at and read from ("": a provider without deployments).
	Deployment string `json:"deployment,omitempty"`
	Kind       string `json:"kind"`
	State      string `json:"state"` // StateSubmitting or StateSubmitted
	ProviderID string `json:"provider_id,omitempty"`
	// ProviderState is the provider's last word (in_progress, finalizing, …).
	ProviderState string `json:"provider_state,omitempty"`
	Counts        Counts `json:"counts"`
	Round         int    `json:"round"`          // 1 for the first batch of a record; +1 per retry round
	Prev          string `json:"prev,omitempty"` // the batch whose stragglers this round resubmits
	// Tokens are the custom_ids of the batch's records (broker.RecordToken of
	// the record ids); each one's Item is rec.<job>.<action>.<token>.
	Tokens         []string  `json:"tokens"`
	Owner          string    `json:"owner"`
	LeaseUntil     time.Time `json:"lease_until"`
	Created        time.Time `json:"created"`
	Submitted      time.Time `json:"submitted,omitzero"`
	Polled         time.Time `json:"polled,omitzero"`
	SubmitAttempts int       `json:"submit_attempts,omitempty"`
	PollErrors     int       `json:"poll_errors,omitempty"` // consecutive polls refused permanently
	LastError      string    `json:"last_error,omitempty"`
}

// Item is one record in a batch: everything needed to submit it again and
// to write its result or dead letter, without its work message.
type Item struct {
	Batch      string          `json:"batch"`
	ID         string          `json:"id"`
	Data       json.RawMessage `json:"data"`           // the work message body (a broker.Envelope)
	Line       json.RawMessage `json:"line,omitempty"` // the encoded batch request
	Replays    int             `json:"replays,omitempty"`
	Deliveries int             `json:"deliveries"`
	Round      int             `json:"round"`
	Attempts   []retry.Attempt `json:"attempts,omitempty"` // failed rounds
	// Deployment is its batch's (Header.Deployment), set when its outcome
	// is handed to the Handler: the result names it.
	Deployment string `json:"-"`
}

// FailRound records the item's current batch round as a failed call
// (class, error): a call that counts against max_calls.
func (it *Item) FailRound(class retry.Class, err string) {
	it.Attempts = append(it.Attempts, retry.Attempt{N: it.Round, Delivery: max(it.Deliveries, 1), Class: class,
		Error: err, At: time.Now().UTC(), Batch: true})
}

// Token is the item's custom_id.
func (it *Item) Token() string { return broker.RecordToken(it.ID) }

// HeaderKey is the KV key of a batch.
func HeaderKey(job, action, key string) string { return "batch." + job + "." + action + "." + key }

// ItemKey is the KV key of a record's item.
func ItemKey(job, action, token string) string { return "rec." + job + "." + action + "." + token }

// firstKey is the deterministic key of a first-round batch: the same records
// always make the same key.
func firstKey(job, action string, items []*Item) string {
	parts := make([]string, len(items))
	for i, it := range items {
		parts[i] = it.Token() + ":" + strconv.Itoa(it.Replays)
	}
	sort.Strings(parts)
	return hashKey(job, action, "1", strings.Join(parts, ","))
}

// nextKey is the deterministic key of the retry round after batch key.
func nextKey(key string) string { return hashKey(key, "next") }

func hashKey(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:10])
}

// List returns the outstanding batches of job ("" for every job), oldest first.
func List(ctx context.Context, b *broker.Broker, job string) ([]*Header, error) {
	kv, err := b.KV(ctx, broker.BucketBatches)
	if err != nil {
		return nil, err
	}
	return listHeaders(ctx, kv, job)
}

func listHeaders(ctx context.Context, kv jetstream.KeyValue, job string) ([]*Header, error) {
	filter := "batch.>"
	if job != "" {
		filter = "batch." + job + ".>"
	}
	kl, err := kv.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil, err
	}
	defer kl.Stop()
	var out []*Header
	for k := range kl.Keys() {
		h, _, err := getHeader(ctx, kv, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return nil, err
		}
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.Before(out[j].Created) })
	return out, nil
}

func getHeader(ctx context.Context, kv jetstream.KeyValue, key string) (*Header, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	var h Header
	if err := json.Unmarshal(e.Value(), &h); err != nil {
		return nil, 0, fmt.Errorf("batch %s: %w", key, err)
	}
	return &h, e.Revision(), nil
}

func getItem(ctx context.Context, kv jetstream.KeyValue, key string) (*Item, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	var it Item
	if err := json.Unmarshal(e.Value(), &it); err != nil {
		return nil, 0, fmt.Errorf("batch item %s: %w", key, err)
	}
	return &it, e.Revision(), nil
}
