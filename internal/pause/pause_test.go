package pause

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a fake clock the test moves.
type clock struct{ t time.Time }

func newClock() *clock                   { return &clock{t: time.Unix(1_000_000, 0)} }
func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// driven is a watch of c ticking every 100 ms, with a second of slack.
func driven(c *clock) *Watch { return New(100*time.Millisecond, time.Second, c.now) }

// ticks ticks w n times on time.
func ticks(w *Watch, c *clock, n int) {
	for range n {
		c.advance(100 * time.Millisecond)
		w.Tick()
	}
}

// Ticks on time, and late by less than the slack (a loaded machine), are
// no pause; a gap past the slack is one, lost by its length beyond the
// tick, and seen by Lost before the watch's next tick too.
func TestWatchSeesAPause(t *testing.T) {
	c := newClock()
	w := driven(c)
	ticks(w, c, 10)
	c.advance(900 * time.Millisecond) // a tick 0.8 s late: within the slack
	w.Tick()
	require.Zero(t, w.Lost())
	require.Zero(t, w.Count())

	c.advance(12 * time.Second) // stopped 12 s
	require.Equal(t, 12*time.Second-100*time.Millisecond, w.Lost(), "seen before the watch ticks")
	w.Tick()
	require.Equal(t, 12*time.Second-100*time.Millisecond, w.Lost(), "and the same once it has")
	require.EqualValues(t, 1, w.Count())
	ticks(w, c, 5)
	require.Equal(t, 12*time.Second-100*time.Millisecond, w.Lost(), "nothing more while it runs")
}

// The process's watch looks only while held: a long wait with nobody
// holding it is no pause, and its goroutine ends with the last hold.
func TestProcessWatchHeld(t *testing.T) {
	w := &Watch{tick: time.Millisecond, slack: time.Hour, now: time.Now}
	require.Zero(t, w.Lost())
	release := w.Hold()
	inner := w.Hold()
	inner()
	inner() // twice is once
	require.Equal(t, 1, w.holds)
	release()
	require.Zero(t, w.holds)
	require.Zero(t, w.Lost(), "not held: nothing is measured")
}

// A timeout that falls due after a pause moves on by a grace — the answer
// that arrived meanwhile is read — and then ends its context with its
// cause; stopped, it ends with Canceled.
func TestTimeoutCountsRunningTime(t *testing.T) {
	c := newClock()
	w := driven(c)
	cause := errors.New("request timeout")
	x := w.timeout(context.Background(), time.Hour, cause)
	c.advance(40 * time.Second) // stopped past the timeout
	x.fire()                    // the timer, on thaw
	require.NoError(t, x.ctx.Err(), "moved on by a grace, not ended")
	x.fire() // due again, no pause since
	require.ErrorIs(t, context.Cause(x.ctx), cause)
	x.stop()

	y := w.timeout(context.Background(), time.Hour, cause)
	y.stop()
	require.ErrorIs(t, context.Cause(y.ctx), context.Canceled)
}
