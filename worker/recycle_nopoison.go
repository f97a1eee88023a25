//go:build !jetpool_poison

package worker

// poisonRecycled is false in the ordinary build: the checks it guards
// compile away (recycle_poison.go has the build that poisons).
const poisonRecycled = false

// recycledMark has no size here.
type recycledMark struct{}

func (d *delivery) isRecycled() bool {
	_ = d.mark // nothing to read: it has no size
	return false
}

func poison(*delivery) {}
