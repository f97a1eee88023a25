package retry

import (
	"context"
	"sync"
	"time"
)

// fakeClock records the sleeps it is asked for and returns at once,
// advancing its own time by them.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	sleeps  []time.Duration
	onSleep func() // called during each Sleep, e.g. to cancel the context
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	hook := c.onSleep
	c.mu.Unlock()
	if hook != nil {
		hook()
	}
	return ctx.Err()
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// fakeHistory is a conversation, one string per turn.
type fakeHistory struct{ turns []string }

func (h *fakeHistory) Len() int       { return len(h.turns) }
func (h *fakeHistory) Truncate(n int) { h.turns = h.turns[:n] }
func (h *fakeHistory) Add(turns ...string) {
	h.turns = append(h.turns, turns...)
}
func (h *fakeHistory) Turns() []string { return append([]string(nil), h.turns...) }
