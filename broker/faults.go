package broker

import (
	"context"
	"errors"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TooLarge reports whether err says a message can never be stored as it
// is: over the server's max_payload, or over a stream's maximum message
// size. Retrying such a write cannot succeed.
func TooLarge(err error) bool {
	return errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum) ||
		strings.Contains(err.Error(), "maximum payload exceeded")
}

// jsInsufficientResources is the server's error code for a store that is
// out of space or over its limits ("insufficient resources").
const (
	jsInsufficientResources = 10023
	jsStorageExceeded       = 10047 // "insufficient storage resources available": an account's max_file_store
)

// StoreFull reports whether err is a store refusing a write for want of
// space: the disk, or a limit (max_file_store, a stream's).
func StoreFull(err error) bool {
	var apiErr *jetstream.APIError
	return err != nil && (errors.As(err, &apiErr) && (apiErr.ErrorCode == jsInsufficientResources || apiErr.ErrorCode == jsStorageExceeded) ||
		strings.Contains(err.Error(), "insufficient resources") || strings.Contains(err.Error(), "insufficient storage"))
}

// FaultHint says, for a write or lookup that failed, what is wrong with the
// store and what to do, in a few words for an operator: "" for an error that
// is not a storage fault (a request of ours that was refused, say).
func FaultHint(err error) string {
	switch {
	case err == nil:
		return ""
	case StoreFull(err):
		return "the server's store is full or at its limits: free disk space or raise max_file_store / the stream's limits"
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		strings.Contains(err.Error(), "no ack from the store"):
		return "the stream does not answer: its leader is being elected, a node is down, or the cluster lost quorum"
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionReconnecting),
		errors.Is(err, nats.ErrDisconnected), strings.Contains(err.Error(), "of reconnecting"):
		return "the connection to NATS is down; it reconnects on its own"
	case errors.Is(err, jetstream.ErrStreamNotFound), strings.Contains(err.Error(), "stream not found"):
		return "the stream is missing: run any jetpool command against the server to recreate it (Ensure)"
	case strings.Contains(err.Error(), "permissions violation"):
		return "this process's NATS user may not write there: check its permissions (deploy/nats)"
	}
	return "the store refused the write"
}
