package worker

import (
	"sync"
	"time"
)

// Read-ahead: a busy pool pulls a few records beyond its free slots, so
// that a slot coming free starts the next record at once instead of
// waiting for a pull's round trip (and for the one fetch loop to finish the
// pull before it). docs/decisions.md ("A pool's read-ahead") has the why.
//
// The buffer is sized by Little's law: what the pool finishes in twice the
// time a pull takes to refill it (the pull's round trip, and the
// FetchGatherWait the fetch loop may spend gathering slots first):
// floor(rate × (rtt + FetchGatherWait) × 2), at most aheadMax. So a record
// waits in it a few milliseconds, about as long as it would have waited at
// the server for the next pull; and a pool that finishes less than one
// record in that time (100/s at a 1 ms round trip: 0.6) reads nothing
// ahead: records are not held from other workers, and a job's tail is
// shared out as before.
//
// A slot coming free takes the oldest buffered record (readAhead.take);
// Stop hands the buffer back at once (Nak, no delay); a buffered record
// is kept alive like every message the pool holds (heartbeat.go).

// aheadMax bounds the records a pool reads ahead: Concurrency/4, at most
// FetchBatchMax.
func aheadMax(concurrency int) int { return min(concurrency/4, FetchBatchMax) }

// readAhead is the pool's buffer of records pulled beyond its free slots.
type readAhead struct {
	mu       sync.Mutex
	tasks    []aheadTask // oldest first
	reserved int         // room promised to pulls in flight
	closed   bool        // Stop: take gives nothing
	// low wakes a fetch loop waiting for a free slot when a slot took a
	// buffered record (cap 1): the buffer may want refilling.
	low chan struct{}

	// The rate and round-trip estimates (fetch loops update them).
	last     time.Time
	lastDone int64
	rate     float64 // records finished a second
	rtt      time.Duration
}

type aheadTask struct {
	task
	at time.Time // when it was pulled
}

func newReadAhead() *readAhead { return &readAhead{low: make(chan struct{}, 1)} }

// take removes the oldest buffered record for a slot coming free.
func (a *readAhead) take() (task, bool) {
	a.mu.Lock()
	if a.closed || len(a.tasks) == 0 {
		a.mu.Unlock()
		return task{}, false
	}
	t := a.tasks[0].task
	a.tasks[0] = aheadTask{}
	a.tasks = a.tasks[1:]
	a.mu.Unlock()
	select {
	case a.low <- struct{}{}:
	default:
	}
	return t, true
}

// reserve promises room for up to max more records, once the buffer (with
// the room already promised) is down to half its target: a smaller pull is
// not worth its request. unreserve returns what a pull did not fill.
func (a *readAhead) reserve(target, max int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	have := len(a.tasks) + a.reserved
	if a.closed || target <= 0 || have > target/2 {
		return 0
	}
	n := min(target-have, max)
	a.reserved += n
	return n
}

// put buffers t in room reserved for it; false once the buffer is closed
// (the caller hands t back).
func (a *readAhead) put(t task, now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.reserved--
	if a.closed {
		return false
	}
	a.tasks = append(a.tasks, aheadTask{task: t, at: now})
	return true
}

func (a *readAhead) unreserve(n int) {
	a.mu.Lock()
	a.reserved -= n
	a.mu.Unlock()
}

// observe updates the estimates: done is the pool's count of records
// finished so far; rtt, when positive, a busy pull's round trip.
func (a *readAhead) observe(now time.Time, done int64, rtt time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if rtt > 0 {
		if a.rtt == 0 {
			a.rtt = rtt
		} else {
			a.rtt += (rtt - a.rtt) / 4
		}
	}
	if a.last.IsZero() {
		a.last, a.lastDone = now, done
		return
	}
	if dt := now.Sub(a.last); dt >= 20*time.Millisecond {
		r := float64(done-a.lastDone) / dt.Seconds()
		a.rate += (r - a.rate) / 4
		a.last, a.lastDone = now, done
	}
}

// target is how many records to keep buffered:
// floor(rate × (rtt + FetchGatherWait) × 2), at most max.
func (a *readAhead) target(max int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return min(int(a.rate*(a.rtt+FetchGatherWait).Seconds()*2), max)
}

// counts is the records buffered, by job.
func (a *readAhead) counts() map[string]int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]int64{}
	for _, t := range a.tasks {
		out[t.jr.id]++
	}
	return out
}

// close empties the buffer for good and returns what was in it.
func (a *readAhead) close() []task {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	out := make([]task, 0, len(a.tasks))
	for _, t := range a.tasks {
		out = append(out, t.task)
	}
	a.tasks = nil
	return out
}
