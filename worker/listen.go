package worker

import (
	"context"
	"time"

	"github.com/jetpool/jetpool/broker"
)

// listen subscribes to what the pool hears besides its jobs: requests for
// its stats, the work stream's leader elections and the jobs' pauses. A
// subscription that fails is logged; the pool runs without it.
func (p *Pool) listen() {
	var err error
	if p.ctlSub, err = p.b.NC.Subscribe(broker.SubjectControl, p.answerStats); err != nil {
		p.log.Warn().Err(err).Msg("stats responder not started")
	}
	if p.unwatchElections, err = p.b.WatchElections(p.onElection); err != nil {
		p.log.Warn().Err(err).Msg("not watching the work stream's leader elections")
	}
	if p.unwatchPauses, err = p.b.WatchPauses(p.onPause); err != nil {
		p.log.Warn().Err(err).Msg("not watching the jobs' pauses: a pause is seen within " + pauseRecheck.String())
	}
}

// onElection hears of a new leader of the work stream (consumer "") or of
// one of its consumers (broker.WatchElections). A consumer's first
// election, when it is made and has delivered nothing, cannot deliver a
// record twice; any other, or one whose consumer does not answer, makes the
// moment after it a fault's (worker/handle.go twin).
func (p *Pool) onElection(consumer string) {
	if consumer != "" {
		ctx, cancel := context.WithTimeout(p.runCtx, 3*time.Second)
		c, err := p.b.JS.Consumer(ctx, broker.StreamWork, consumer)
		cancel()
		if err == nil && c.CachedInfo().Delivered.Consumer == 0 {
			return
		}
	}
	p.done.faults.elected(p.cfg.Clock.Now())
	p.elections.Add(1)
	p.log.Info().Str("stream", broker.StreamWork).Str("consumer", consumer).
		Msg("a work stream leader was elected: for a moment, records without a result wait for a possible twin before they call")
}
