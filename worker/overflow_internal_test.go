package worker

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// Cuts keep whole characters: the head, the tail or the middle.
func TestCut(t *testing.T) {
	t.Parallel()
	r := []rune("héllo wörld, 日本語のテキスト")
	for _, tc := range []struct {
		how  string
		keep int
		want string
	}{
		{workflow.KeepHead, 5, "héllo"},
		{workflow.KeepTail, 7, "本語のテキスト"},
		{workflow.KeepMiddle, 6, "örld, "},
		{workflow.KeepHead, 100, string(r)},
		{workflow.KeepTail, 0, ""},
	} {
		got := cut(r, tc.keep, tc.how)
		require.Equal(t, tc.want, got, "%s %d", tc.how, tc.keep)
		require.True(t, utf8.ValidString(got))
	}
	// The middle of an odd cut leans to the head.
	require.Equal(t, "bcd", cut([]rune("abcdef"), 3, workflow.KeepMiddle))
}

// The windows learned keep the sparsest ratio seen: a record of denser
// text never gets another's prompt cut before its call.
func TestLearnKeepsTheSparsestRatio(t *testing.T) {
	t.Parallel()
	a := &workflow.Action{Provider: "p", Model: "m"}
	job := t.Name()
	learn(job, a, retry.Overflow{Limit: 1000, Prompt: 2000, Over: 1000}, 4000) // 2 a token
	learn(job, a, retry.Overflow{Limit: 1000, Prompt: 2000, Over: 1000}, 8000) // 4 a token
	learn(job, a, retry.Overflow{Limit: 1000, Prompt: 2000, Over: 1000}, 6000) // 3 a token
	w, ok := window(job, a)
	require.True(t, ok)
	require.Equal(t, retry.Window{Limit: 1000, PerToken: 4}, w)
	_, ok = window(job, &workflow.Action{Provider: "p", Model: "other"})
	require.False(t, ok, "by model")
	learn(job, a, retry.Overflow{Over: 5}, 100) // names no window: nothing learned
	w, _ = window(job, a)
	require.Equal(t, 1000, w.Limit)
}

// BenchmarkOverflowEstimate is what the estimate costs a record of an
// action with an overflow: block, before its first call: counting the
// prompt's characters, the window lookup and the estimate (docs/workflow.md,
// overflow, compares a tokenizer).
//
//	go test ./worker -run '^$' -bench OverflowEstimate -benchmem
func BenchmarkOverflowEstimate(b *testing.B) {
	const job = "bench-estimate"
	a := &workflow.Action{Provider: "p", Model: "m"}
	learn(job, a, retry.Overflow{Limit: 100000, Prompt: 120000, Over: 20000}, 480000)
	for _, kib := range []int{1, 40} {
		msgs := []provider.Message{{Role: "user", Content: strings.Repeat("The quick brown fox jumps over the lazy dog. ", kib<<10/45)}}
		b.Run(fmt.Sprintf("%dKiB", kib), func(b *testing.B) {
			b.SetBytes(int64(len(msgs[0].Content)))
			for b.Loop() {
				w, ok := window(job, a)
				if !ok {
					b.Fatal("no window")
				}
				w.Estimate(sentRunes("You are terse.", msgs))
			}
		})
	}
}
