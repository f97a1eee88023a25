package worker

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Handlers waiting for a task are let go by retireIdle, as many as were
// idle all the while since its last look; a handler given work between
// two looks is kept; the pool's stop ends the rest.
func TestRetireIdleHandlers(t *testing.T) {
	p := &Pool{tasks: make(chan task), quit: make(chan struct{})}
	var ended sync.WaitGroup
	got := make(chan task, 8)
	wait := func() {
		ended.Add(1)
		go func() {
			defer ended.Done()
			for {
				tk, ok := p.nextTask()
				if !ok {
					return
				}
				got <- tk
			}
		}()
	}
	for range 3 {
		wait()
	}
	require.Eventually(t, func() bool { return p.idle.Load() == 3 }, 5*time.Second, 5*time.Millisecond, "three handlers waiting")
	// One of them works once (it is idle again after), so two at least
	// were idle the whole time.
	p.idle.low.Store(3)
	jr := &jobRunner{}
	p.tasks <- task{jr: jr}
	require.Equal(t, jr, (<-got).jr)
	require.Eventually(t, func() bool { return p.idle.Load() == 3 }, 5*time.Second, 5*time.Millisecond, "back to waiting")
	require.EqualValues(t, 2, p.idle.low.Load(), "the fewest idle at once")

	retired := make(chan struct{})
	go func() { p.retireIdle(20 * time.Millisecond); close(retired) }()
	require.Eventually(t, func() bool { return p.idle.Load() == 0 }, 5*time.Second, 5*time.Millisecond, "every idle handler let go")
	close(p.quit)
	ended.Wait()
	<-retired
	require.Empty(t, got, "a retirement is no task")
}
