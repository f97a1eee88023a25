package worker

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetpool/jetpool/broker"
)

// Scatter-gather of Gather: answers come within GatherWait, and the gather
// ends early once GatherQuiet passes with no new answer. A decision that a
// worker's silence changes (nobody serves a job, every worker stopped
// calling for it) waits longer, GatherPatient and GatherPatientQuiet: a
// busy host answers late, and a worker taken for absent would be doubled
// or taken for stopped.
const (
	GatherWait         = 300 * time.Millisecond
	GatherQuiet        = 50 * time.Millisecond
	GatherPatient      = 2 * time.Second
	GatherPatientQuiet = 400 * time.Millisecond
)

// Gather asks every live worker for its Stats (scatter-gather on
// jetpool.ctl.stats) and returns the answers, one per worker. With no
// worker, the server's no-responders status ends it at once; otherwise it
// ends GatherQuiet after the last answer, GatherWait at most. `jetpool
// status` and the dashboard read the workers this way.
func Gather(b *broker.Broker) ([]Stats, error) {
	return GatherWithin(b, GatherWait, GatherQuiet)
}

// GatherWithin is Gather waiting at most wait, and quiet after the last
// answer.
func GatherWithin(b *broker.Broker, wait, quiet time.Duration) ([]Stats, error) {
	inbox := nats.NewInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := b.NC.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := b.NC.PublishRequest(broker.SubjectControl, inbox, nil); err != nil {
		return nil, err
	}
	var out []Stats
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	silence := time.NewTimer(wait)
	defer silence.Stop()
	for {
		select {
		case m := <-ch:
			if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
				return out, nil // no responders: no worker is running
			}
			var s Stats
			if json.Unmarshal(m.Data, &s) == nil {
				out = append(out, s)
			}
			silence.Reset(quiet)
		case <-silence.C:
			return out, nil
		case <-deadline.C:
			return out, nil
		}
	}
}
