package broker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// The decoder hands results on in the order they were read, whatever
// order its goroutines finish in; the first failure (a result that does not
// decode, or fn's own error) ends each, fn sees nothing after it, and once
// the read is stopped and drained no goroutine is left behind.
func TestOrderedDecoder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const n = 5 * decodeAhead
	run := func(bad int, fn func(*Result) error) error {
		ctx, cancel := context.WithCancel(context.Background())
		d := newOrderedDecoder()
		go func() {
			defer d.finish()
			for i := range n {
				data := fmt.Appendf(nil, `{"id":"r%d","status":"ok","output":{"n":%d,"pad":"%0*d"}}`, i, i, i%97, 0)
				if i == bad {
					data = fmt.Appendf(nil, `{"id":"r%d","status":`, i)
				}
				if d.add(ctx, fmt.Sprintf("jetpool.results.j.a.ok.r%d", i), data) != nil {
					return
				}
			}
		}()
		defer func() { cancel(); d.drain() }()
		return d.each(fn)
	}

	var got []string
	require.NoError(t, run(-1, func(r *Result) error { got = append(got, r.ID); return nil }))
	require.Len(t, got, n)
	for i, id := range got {
		require.Equal(t, fmt.Sprintf("r%d", i), id, "handed on out of read order")
	}

	got = nil
	err := run(2500, func(r *Result) error { got = append(got, r.ID); return nil })
	require.EqualError(t, err, "result jetpool.results.j.a.ok.r2500: unexpected end of JSON input")
	require.Len(t, got, 2500, "every result before the bad one, and none after it")

	stop := errors.New("disk full")
	calls := 0
	require.ErrorIs(t, run(-1, func(*Result) error {
		calls++
		if calls == 100 {
			return stop
		}
		return nil
	}), stop)
	require.Equal(t, 100, calls, "fn is not called after its error")

	// fn that never returns (t.FailNow in a test's callback, a panic): the
	// caller's deferred stop and drain still end everything.
	func() {
		defer func() { require.Equal(t, "stuck", recover()) }()
		_ = run(-1, func(*Result) error { panic("stuck") })
	}()
}
