package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

// TestSpread: calls go to deployments in proportion to their rpm, evenly
// without one, and none to a resting one while another is not; when all
// rest, the round goes on as if none did (the limiter then waits).
func TestSpread(t *testing.T) {
	t.Parallel()
	cfg := provider.Config{Name: "oa", Kind: provider.KindOpenAI, Deployments: []provider.Deployment{
		{Limits: &provider.Limits{RPM: 600}}, {Limits: &provider.Limits{RPM: 1200}}, {Name: "eu", Limits: &provider.Limits{RPM: 600}}}}
	s := newSpread(cfg)
	require.Equal(t, []string{"oa-1", "oa-2", "eu"}, s.names)
	count := func(n int, ok func(int) bool) []int {
		got := make([]int, len(s.names))
		for range n {
			got[s.next(ok)]++
		}
		return got
	}
	all := func(int) bool { return true }
	require.Equal(t, []int{100, 200, 100}, count(400, all), "by rpm")
	require.Equal(t, []int{0, 200, 100}, count(300, func(i int) bool { return i != 0 }), "none to a resting one")
	require.Equal(t, []int{100, 200, 100}, count(400, func(int) bool { return false }), "all resting: as if none")

	even := newSpread(provider.Config{Name: "x", Deployments: []provider.Deployment{{}, {}}})
	got := [2]int{}
	for range 10 {
		got[even.next(all)]++
	}
	require.Equal(t, [2]int{5, 5}, got, "alike without rpm")
}
