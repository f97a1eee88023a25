package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Every held message is due once its own interval has passed since it was
// held or last beaten, and counts as beaten from then; a released one never.
func TestBeatsDue(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	b := newBeats(3 * time.Second)
	m1, m2, m3 := &fakeMsg{id: "1"}, &fakeMsg{id: "2"}, &fakeMsg{id: "3"}
	b.hold(m1, 1500*time.Millisecond, at(0))
	b.hold(m2, 3*time.Second, at(1000))
	b.hold(m3, 1500*time.Millisecond, at(2000))
	require.Equal(t, 375*time.Millisecond, b.tick, "a quarter of the shortest interval")
	require.Equal(t, 3, b.count())

	require.ElementsMatch(t, []jetstream.Msg{m1}, b.due(at(1500)))
	require.Empty(t, b.due(at(2000)), "m1 was beaten at 1.5 s")
	require.ElementsMatch(t, []jetstream.Msg{m1, m3}, b.due(at(3500)))
	require.ElementsMatch(t, []jetstream.Msg{m2}, b.due(at(4000)))
	b.release(m1)
	require.ElementsMatch(t, []jetstream.Msg{m3}, b.due(at(5000)), "m1 released")
	require.Equal(t, 2, b.count())
}

// Back from a lost connection (soon), every held message is due at once,
// whatever its interval; then each goes on from that beat.
func TestBeatsSoonAfterReconnect(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	b := newBeats(5 * time.Second)
	m1, m2 := &fakeMsg{id: "1"}, &fakeMsg{id: "2"}
	b.hold(m1, 5*time.Second, at(0))
	b.hold(m2, 5*time.Second, at(4000))
	require.Empty(t, b.due(at(4500)))
	b.soon()
	require.ElementsMatch(t, []jetstream.Msg{m1, m2}, b.due(at(4600)))
	require.Empty(t, b.due(at(9000)), "beaten at 4.6 s")
	require.ElementsMatch(t, []jetstream.Msg{m1, m2}, b.due(at(9600)))
}
