package worker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
)

// StorageFault is a kind of write the store keeps refusing: shown by
// `jetpool status`, the worker's log (once when it starts, once when it
// ends) and `jetpool run`.
type StorageFault struct {
	Write    string    `json:"write"`  // "result", "dead letter", "state", "next action", …
	Stream   string    `json:"stream"` // where it goes
	Error    string    `json:"error"`  // the last refusal
	Hint     string    `json:"hint"`   // what is wrong and what to do, for the last refusal (broker.FaultHint)
	Since    time.Time `json:"since"`
	Failures int       `json:"failures"`
}

// faults tracks the store's health as the completer sees it: a kind of
// write that fails is reported when it starts failing and when it lands
// again, not once per record.
type faults struct {
	mu  sync.Mutex
	cur map[string]*StorageFault // by Write
	// last is when a write last failed or a fault ended (unix ns): see
	// recent.
	last atomic.Int64
}

// recent reports whether a write failed, or a fault ended, within the last
// d: the store was in trouble a moment ago.
func (f *faults) recent(now time.Time, d time.Duration) bool {
	return now.UnixNano()-f.last.Load() < d.Nanoseconds()
}

// elected is a leader election of the work stream or one of its consumers
// (broker.WatchElections): not a failed write, but the moment after it is
// one in which a record may be delivered twice, so it counts as recent.
func (f *faults) elected(now time.Time) { f.last.Store(now.UnixNano()) }

func (f *faults) fail(what, stream string, err error, log zerolog.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last.Store(time.Now().UnixNano())
	if f.cur == nil {
		f.cur = map[string]*StorageFault{}
	}
	if sf := f.cur[what]; sf != nil {
		sf.Failures++
		sf.Error, sf.Hint = err.Error(), broker.FaultHint(err) // the last refusal says what is wrong now
		return
	}
	sf := &StorageFault{Write: what, Stream: stream, Error: err.Error(), Hint: broker.FaultHint(err), Since: time.Now(), Failures: 1}
	f.cur[what] = sf
	log.Warn().Str("write", what).Str("stream", stream).Err(err).Str("hint", sf.Hint).
		Msgf("%s writes to %s are failing: the records are held and their writes tried again (no call is repeated); pulling pauses while they are held", what, stream)
}

func (f *faults) ok(what string, log zerolog.Logger) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sf := f.cur[what]
	if sf == nil {
		return
	}
	delete(f.cur, what)
	f.last.Store(time.Now().UnixNano())
	log.Info().Str("write", what).Str("stream", sf.Stream).Int("failures", sf.Failures).
		Dur("for", time.Since(sf.Since).Round(time.Millisecond)).Msgf("%s writes to %s land again", what, sf.Stream)
}

// list is the faults now.
func (f *faults) list() []StorageFault {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]StorageFault, 0, len(f.cur))
	for _, sf := range f.cur {
		out = append(out, *sf)
	}
	return out
}
