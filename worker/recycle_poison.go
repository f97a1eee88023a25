//go:build jetpool_poison

package worker

import "math"

// poisonRecycled: this build poisons a recycled delivery instead of
// reusing it, so that a use after recycle fails loudly
// (go test -tags jetpool_poison ./worker/).
const poisonRecycled = true

// recycledMark says a delivery was recycled.
type recycledMark struct{ recycled bool }

func (d *delivery) isRecycled() bool { return d.mark.recycled }

// poison marks d recycled and leaves in it what fails at once when read:
// nil message, action, envelope and slot (a nil dereference), and counts
// and names no delivery has.
func poison(d *delivery) {
	d.mark.recycled = true
	d.job = "\x00recycled delivery"
	d.index = -1
	d.n = math.MinInt32
	d.seq = math.MaxUint64
	d.stateRev = math.MaxUint64
	d.revision = -1
	d.next = "\x00recycled delivery"
}
