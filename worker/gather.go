package worker

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetpool/jetpool/broker"
)

// Scatter-gather of Gather: answers come within GatherWait, and the gather
// ends early once GatherQuiet passes with no new answer.
const (
	GatherWait  = 300 * time.Millisecond
	GatherQuiet = 50 * time.Millisecond
)

// Gather asks every live worker for its Stats (scatter-gather on
// jetpool.ctl.stats) and returns the answers, one per worker. With no
// worker, the server's no-responders status ends it at once; otherwise it
// ends GatherQuiet after the last answer, GatherWait at most. `jetpool
// status` and the dashboard read the workers this way.
func Gather(b *broker.Broker) ([]Stats, error) {
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
	deadline := time.NewTimer(GatherWait)
	defer deadline.Stop()
	quiet := time.NewTimer(GatherWait)
	defer quiet.Stop()
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
			quiet.Reset(GatherQuiet)
		case <-quiet.C:
			return out, nil
		case <-deadline.C:
			return out, nil
		}
	}
}
