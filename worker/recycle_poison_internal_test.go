//go:build jetpool_poison

package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// A use of a delivery after the completer recycled it panics in this
// build, at an accessor or at a field the poison left nil.
func TestRecycledDeliveryPanics(t *testing.T) {
	t.Parallel()
	fresh := func() *delivery {
		d := deliveries.Get().(*delivery)
		*d = delivery{job: "j", action: &workflow.Action{Name: "a"}, env: &broker.Envelope{ID: "r1"},
			n: 1, firstRun: true, reusable: true}
		require.True(t, d.unpaid())
		return d
	}

	d := fresh()
	recycle(d)
	require.PanicsWithValue(t, "worker: delivery of job \x00recycled delivery used after recycle",
		func() { d.unpaid() })
	require.Panics(t, func() { d.nextState(nil) })
	require.Panics(t, func() { _ = d.env.ID }, "the envelope is nil")
	require.Panics(t, func() { _ = d.action.Name }, "the action is nil")
	require.Panics(t, func() { recycle(d) }, "recycled twice")

	// What is not reusable (a batch's, an embedding's) is left alone.
	kept := fresh()
	kept.reusable = false
	recycle(kept)
	require.NotPanics(t, func() { kept.unpaid() })
	require.Equal(t, "r1", kept.env.ID)
}
