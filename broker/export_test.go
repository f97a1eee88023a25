package broker

import "time"

// SetNoResponders sets how long LastMsg retries a lookup nobody answers, and
// a hook called before each retry, until the test ends. Not for parallel
// tests.
func SetNoResponders(wait time.Duration, hook func(stream string)) (restore func()) {
	w, h := noRespondersWait, noResponders
	noRespondersWait, noResponders = wait, hook
	return func() { noRespondersWait, noResponders = w, h }
}

// SetWatchStartWait sets how long WatchAll retries a start nobody answers,
// until the test ends. Not for parallel tests.
func SetWatchStartWait(wait time.Duration) (restore func()) {
	w := watchStartWait
	watchStartWait = wait
	return func() { watchStartWait = w }
}

// NewReconnect is a reconnection a test fires by hand.
func NewReconnect() (rc *Reconnect, fire func()) {
	r := newReconnects()
	return r.next.Load(), r.fire
}
