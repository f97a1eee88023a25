package broker

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// IsConflict reports whether err is a compare-and-set conflict of a KV
// write: Update (or Delete/Purge with LastRevision) given a revision that is
// no longer the key's, or Create of a key that exists. Replicated (R3)
// buckets report a revision conflict with code 10164 instead of 10071, so
// ErrKeyExists alone misses it there; nats.go maps both codes to
// ErrKeyRevisionMismatch (jetstream/kv.go), and Create's to ErrKeyExists.
func IsConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}
