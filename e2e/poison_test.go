package e2e

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// crashLoop is a supervisor of `jetpool worker` children (as systemd or
// Kubernetes restart one): one at a time, started again as soon as it
// dies, until stop.
type crashLoop struct {
	t   *testing.T
	env map[string]string
	job string

	mu      sync.Mutex
	current *proc
	kills   []time.Time
	starts  int
	stopped bool
	done    chan struct{}
}

func (c *crashLoop) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		if c.stopped {
			c.mu.Unlock()
			return
		}
		p := start(c.t, c.env, "worker", "--concurrency", "4", "--job", c.job)
		c.current = p
		c.starts++
		c.mu.Unlock()
		<-p.done
	}
}

// kill SIGKILLs the worker that runs now: the record it was calling for
// killed it.
func (c *crashLoop) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.current != nil && !c.stopped {
		_ = c.current.cmd.Process.Signal(syscall.SIGKILL)
		c.kills = append(c.kills, time.Now())
	}
}

func (c *crashLoop) stop() {
	c.mu.Lock()
	c.stopped = true
	if c.current != nil {
		_ = c.current.cmd.Process.Signal(syscall.SIGTERM)
	}
	c.mu.Unlock()
	<-c.done
}

// A worker that one record kills every time it calls for it, restarted
// again and again: the records it had in flight beside the killer, or read
// ahead, die with it each time, but only the record that was itself being
// worked, alone, when its worker died is poison. It is dead-lettered as
// max_deliveries; no innocent record is (6 of 60 were), each has its one
// result, and none is paid again after a success.
func TestChaosCrashLoopingWorkerSparesInnocents(t *testing.T) {
	chaosOnly(t)
	t.Parallel()
	const (
		n       = 40
		ackWait = 2 * time.Second
	)
	for _, poison := range []int{3, 17} {
		t.Run(fmt.Sprintf("r%d", poison), func(t *testing.T) {
			t.Parallel()
			b, url := embeddedServer(t, ackWait)
			m := newModel(t, 300*time.Millisecond)
			loop := &crashLoop{t: t, done: make(chan struct{})}
			killer := fmt.Sprintf("answer/r%d", poison)
			m.script = func(key string, _ int) (providertest.Reply, bool) {
				if key == killer {
					loop.kill()
				}
				return providertest.Reply{}, false
			}
			wf := modelWorkflow(t, m, "false", "answer")
			job := dispatch(t, b, wf, n, fmt.Sprintf("crashloop-%d", poison))
			loop.env = workerEnv(url, ackWait, "CHAOS_API_KEY", "k", "JETPOOL_KEY_HOSTS", "CHAOS_API_KEY="+m.Listener.Addr().String())
			loop.job = job.ID
			go loop.run()
			j, prog := waitFinished(t, b, job.ID, 4*time.Minute, func(j *broker.Job) string { return explainMissing(b, j, m, n) })
			loop.stop()

			res := checkResults(t, b, j, n)
			var innocents []string
			for id, r := range res {
				if id != fmt.Sprintf("r%d", poison) && r.Status != broker.StatusOK {
					innocents = append(innocents, fmt.Sprintf("%s (%s: %s)", id, r.Reason, r.Error.Message))
				}
			}
			require.Empty(t, innocents, "innocent records dead-lettered")
			r := res[fmt.Sprintf("r%d", poison)]
			require.Equal(t, broker.StatusFailed, r.Status)
			require.Equal(t, string(retry.ReasonMaxDeliveries), r.Reason)
			require.Contains(t, r.Error.Message, "while it ran alone in its worker")
			require.EqualValues(t, n-1, prog.OK)
			es, err := deadletter.List(t.Context(), b, deadletter.Filter{Job: job.ID})
			require.NoError(t, err)
			require.Len(t, es, 1, "one dead letter: the killer")
			loop.mu.Lock()
			kills, starts := loop.kills, loop.starts
			loop.mu.Unlock()
			t.Logf("%d worker processes started, %d killed by r%d; %s", starts, len(kills), poison,
				checkPromise(t, b, j, m, promise{n: n, kills: kills, bound: 20}))
		})
	}
}
