package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The read-ahead is sized by what the pool finishes while a pull refills
// it, and is nothing for a pool slower than that.
func TestReadAheadTarget(t *testing.T) {
	a := newReadAhead()
	require.Zero(t, a.target(250), "no estimate yet: nothing read ahead")
	t0 := time.Unix(1000, 0)
	a.observe(t0, 0, time.Millisecond)
	for i := 1; i <= 40; i++ { // 10,000 records a second, 1 ms round trips
		a.observe(t0.Add(time.Duration(i)*20*time.Millisecond), int64(i)*200, time.Millisecond)
	}
	// 10,000/s × (1 ms + FetchGatherWait 2 ms) × 2 = 60.
	require.InDelta(t, 60, a.target(250), 1)
	require.Equal(t, 16, a.target(aheadMax(64)), "at most a quarter of the concurrency")

	slow := newReadAhead() // 10 calls of 100 ms: 100 records a second
	slow.observe(t0, 0, time.Millisecond)
	for i := 1; i <= 40; i++ {
		slow.observe(t0.Add(time.Duration(i)*100*time.Millisecond), int64(i)*10, time.Millisecond)
	}
	require.Zero(t, slow.target(250), "100/s × 3 ms × 2 is less than one record")
}

// A pull reserves room only when the buffer is down to half its target;
// records come out oldest first; once closed, nothing is taken or put, and
// close returns what was buffered.
func TestReadAheadBuffer(t *testing.T) {
	a := newReadAhead()
	at := func(s int) time.Time { return time.Unix(1000+int64(s), 0) }
	a1, b1 := &jobRunner{id: "a"}, &jobRunner{id: "b"}
	jrs := []*jobRunner{a1, b1, a1, a1, b1}
	require.Equal(t, 8, a.reserve(8, 256))
	require.Zero(t, a.reserve(8, 256), "room for 8 is already promised")
	for i, jr := range jrs { // put at +0 s … +4 s
		require.True(t, a.put(task{jr: jr}, at(i)))
	}
	a.unreserve(3) // the pull brought 5 of 8
	require.Zero(t, a.reserve(8, 256), "5 of 8 is above half")
	require.Equal(t, map[string]int64{"a": 3, "b": 2}, a.counts())

	first, ok := a.take()
	require.True(t, ok)
	require.Same(t, jrs[0], first.jr, "oldest first")
	select {
	case <-a.low:
	default:
		t.Fatal("a take wakes the fetch loop")
	}
	require.Equal(t, 2, a.reserve(8, 2), "4 of 8 is half: room, at most max")
	a.unreserve(2)

	require.Len(t, a.close(), 4)
	_, ok = a.take()
	require.False(t, ok, "closed")
	require.Zero(t, a.reserve(8, 256))
	a.reserved = 1
	require.False(t, a.put(task{jr: jrs[0]}, at(20)), "a pull's records after close go back")
	require.Zero(t, a.reserved)
}
