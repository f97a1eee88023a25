package broker

import (
	"strings"

	"github.com/nats-io/nats.go"
)

const consumerElected = "$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED." + StreamWork + "."

// ElectionSubjects are the advisories the servers send when the work
// stream, or one of its consumers, has a new leader. A consumer's new leader
// may deliver again, as new, a record its lost leader had just handed out
// (docs/durability.md, "Twin deliveries"): a worker that hears of an
// election treats the next moments as a storage fault, so a record it is
// handed then without a result waits for a possible twin before it calls.
var ElectionSubjects = []string{
	consumerElected + ">",
	"$JS.EVENT.ADVISORY.STREAM.LEADER_ELECTED." + StreamWork,
}

// WatchElections calls fn, on the subscription's goroutine (one at a
// time, in order), for every election of the work stream (consumer "") or
// of one of its consumers, until the returned stop is called. A server that does not let this user subscribe (an older
// deploy/nats configuration) only makes the watch deaf: the connection's
// error handler reports it.
func (b *Broker) WatchElections(fn func(consumer string)) (stop func(), err error) {
	var subs []*nats.Subscription
	stop = func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}
	for _, subj := range ElectionSubjects {
		s, err := b.NC.Subscribe(subj, func(m *nats.Msg) {
			consumer, _ := strings.CutPrefix(m.Subject, consumerElected)
			if consumer == m.Subject {
				consumer = "" // the stream's own
			}
			fn(consumer)
		})
		if err != nil {
			stop()
			return nil, err
		}
		subs = append(subs, s)
	}
	return stop, nil
}
