package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/ratelimit"
)

// picks is how many of n picks went to each deployment of s, the rooms
// as room(i) says before each.
func picks(s *spread, n int, room func(i int) ratelimit.Room, avoid int) []int {
	got := make([]int, len(s.names))
	rooms := make([]ratelimit.Room, len(s.names))
	for range n {
		for i := range rooms {
			rooms[i] = room(i)
		}
		got[s.pick(rooms, avoid)]++
	}
	return got
}

// TestSpread: calls go to deployments in proportion to their rpm, evenly
// without one, and none to a resting one while another is not; when all
// rest, the round goes on as if none did (the limiter then waits).
func TestSpread(t *testing.T) {
	t.Parallel()
	cfg := provider.Config{Name: "oa", Kind: provider.KindOpenAI, Deployments: []provider.Deployment{
		{Limits: &provider.Limits{RPM: 600}}, {Limits: &provider.Limits{RPM: 1200}}, {Name: "eu", Limits: &provider.Limits{RPM: 600}}}}
	s := newSpread(cfg, "")
	require.Equal(t, []string{"oa-1", "oa-2", "eu"}, s.names)
	require.Equal(t, s.names, s.keys)
	free := func(int) ratelimit.Room { return ratelimit.Room{} }
	require.Equal(t, []int{100, 200, 100}, picks(s, 400, free, -1), "by rpm")
	first := func(i int) ratelimit.Room { return ratelimit.Room{Resting: i == 0} }
	require.Equal(t, []int{0, 200, 100}, picks(s, 300, first, -1), "none to a resting one")
	all := func(int) ratelimit.Room { return ratelimit.Room{Resting: true} }
	require.Equal(t, []int{100, 200, 100}, picks(s, 400, all, -1), "all resting: as if none")
	require.Equal(t, []int{0, 200, 100}, picks(s, 300, free, 0), "none to the one avoided while others may")

	even := newSpread(provider.Config{Name: "x", Deployments: []provider.Deployment{{}, {}}}, "@2")
	require.Equal(t, []string{"x-1@2", "x-2@2"}, even.keys, "a revision's adapters apart")
	require.Equal(t, []int{5, 5}, picks(even, 10, free, -1), "alike without rpm")
}

// TestSpreadByRoom: a deployment with room now is preferred to one whose
// schedule is booked ahead or whose window is full; among those with
// room, the rates they are paced at weigh (a learned pace lowers a
// deployment's share); when none has room, the round goes over all.
func TestSpreadByRoom(t *testing.T) {
	t.Parallel()
	s := newSpread(provider.Config{Name: "x", Deployments: []provider.Deployment{{}, {}}}, "")
	waits := func(i int) ratelimit.Room {
		return ratelimit.Room{Wait: time.Duration(1-i) * time.Second, Rate: 2}
	}
	require.Equal(t, []int{0, 10}, picks(s, 10, waits, -1), "the one booked ahead gets nothing while the other has room")
	full := func(i int) ratelimit.Room { return ratelimit.Room{Full: i == 1} }
	require.Equal(t, []int{10, 0}, picks(s, 10, full, -1), "nor one whose window is full")
	require.Equal(t, []int{0, 10}, picks(s, 10, full, 0), "unless the other is to be avoided")
	paced := func(i int) ratelimit.Room { return ratelimit.Room{Rate: []float64{2, 18}[i]} }
	require.Equal(t, []int{10, 90}, picks(s, 100, paced, -1), "by rate when both are paced")
	busy := func(i int) ratelimit.Room { return ratelimit.Room{Wait: time.Second, Rate: []float64{5, 15}[i]} }
	require.Equal(t, []int{25, 75}, picks(s, 100, busy, -1), "as long to wait for each: by rate")
	failing := func(i int) ratelimit.Room { return ratelimit.Room{Failing: i == 0} }
	require.Equal(t, []int{0, 10}, picks(s, 10, failing, -1), "none to one failing while the other has room")
	both := func(i int) ratelimit.Room { return ratelimit.Room{Failing: i == 0, Full: i == 1} }
	require.Equal(t, []int{0, 10}, picks(s, 10, both, -1), "nor while the other is full")
	soon := func(i int) ratelimit.Room { return ratelimit.Room{Wait: time.Duration(2-i) * time.Second, Rate: 1} }
	require.Equal(t, []int{0, 10}, picks(s, 10, soon, -1), "none with room: the one free soonest")
	mixed := func(i int) ratelimit.Room { return ratelimit.Room{Rate: []float64{3, 0}[i]} }
	require.Equal(t, []int{50, 50}, picks(s, 100, mixed, -1), "one not paced: by rpm (alike here)")
}

// TestSpreadCountsItsPicks: calls picked at one instant (a window of
// records answered together) see the same room before any books its slot;
// the spread counts its own picks against each deployment's rate, so they
// divide by rate rather than all going to the one that had room first.
func TestSpreadCountsItsPicks(t *testing.T) {
	t.Parallel()
	s := newSpread(provider.Config{Name: "x", Deployments: []provider.Deployment{{}, {}}}, "")
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	got := [2]int{}
	for range 20 {
		rooms := []ratelimit.Room{{Rate: 2}, {Rate: 8}}
		got[s.choose(rooms, -1, now)]++
	}
	require.Equal(t, [2]int{4, 16}, got, "by rate, at one instant")

	// Picks the limiters never booked (parked, not called) weigh no more
	// than a second past what the limiters show: a deployment is not
	// starved for the picks of long ago.
	for range 200 {
		s.choose([]ratelimit.Room{{Rate: 2}, {Rate: 8}}, -1, now) // far past a second of either's rate
	}
	rooms := []ratelimit.Room{{Rate: 2}, {Rate: 8}}
	s.choose(rooms, -1, now)
	require.LessOrEqual(t, rooms[0].Wait, pickedAheadMax)
	require.LessOrEqual(t, rooms[1].Wait, pickedAheadMax)
	rooms = []ratelimit.Room{{Rate: 2}, {Rate: 8}}
	s.choose(rooms, -1, now.Add(2*pickedAheadMax))
	require.Equal(t, []time.Duration{0, 0}, []time.Duration{rooms[0].Wait, rooms[1].Wait}, "later, the picks of then are gone")
}
