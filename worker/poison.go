package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// A poison record kills (or hangs) whichever worker runs it. But a worker
// that dies takes every record it holds with it: those in its other slots,
// those read ahead, those waiting for a permit. Counting every delivery
// lost with a process against its record dead-lettered the innocent
// records a crash-looping worker had beside the killer: they died with it
// each time, redelivered together after the same AckWait, pulled together
// again.
//
// So a loss counts against a record only when the record was being worked
// alone. A record lost AloneAfterLost times is a suspect: before its call
// it takes its process's one place for a suspect (a process runs one
// suspect at a time; another suspect that comes meanwhile is parked for a
// moment, spending nothing) and writes in its state that this delivery
// runs alone (RecordState.Alone). If that delivery is lost too, its
// process died (or hung) while the suspect was the one suspect it ran:
// the loss is the record's (RecordState.Blamed). A record with
// retry.LostDeliveriesMax losses of its own is poison. An innocent suspect
// never runs beside another suspect in its process, so a killer that is a
// suspect cannot take it down; only a killer's first AloneAfterLost runs,
// which are not alone, can, and those are few.
//
// Deliveries that do not run a session of their own — batch-mode records,
// which wait in their action's batch, and embeddings, sent several to a
// request — keep the count of every loss (retry.LostDeliveriesMax).

// AloneAfterLost is how many of its deliveries a record may lose with a
// process before it runs alone in its process. Two, not one: a worker
// killed once (a deploy, an OOM kill of a busy process) loses every record
// it held once, and running those one at a time would slow the job's
// recovery by as many calls; records lost twice in a row are few.
const AloneAfterLost = retry.LostBeforeAlone

// lostMax bounds the losses of a record that runs alone, counted or not: a
// record that every process loses without it ever being the one that
// died (read ahead each time, say) is let go as poison too, rather than
// delivered for ever.
const lostMax = 4 * retry.LostDeliveriesMax

// suspectPark is how long a suspect waits, parked, while another suspect
// runs in its process; up to twice that, at random.
const suspectPark = 2 * time.Second

// runsAlone reports whether d's record runs a session of its own, so that
// it can be run alone when suspect.
func (d *delivery) runsAlone() bool {
	return !d.action.IsEmbed() && (d.action.Mode != workflow.ModeBatch || d.mode == workflow.ModeOnline)
}

// blamed is the deliveries of the record lost while it ran alone: those
// its state counted, and the one it last ran alone in if that was lost.
func (d *delivery) blamed() int {
	st := d.state
	if st == nil {
		return 0
	}
	n := st.Blamed
	if st.Alone > st.Handled && st.Alone < d.n {
		n++ // no worker handed that delivery back: it died, or hung, with the record alone
	}
	return n
}

// poisoned is the error of a record that has lost too many deliveries of
// its own to run again; nil when it may run.
func (d *delivery) poisoned() *retry.Error {
	lost := d.lost()
	var msg string
	switch blamed := d.blamed(); {
	case !d.runsAlone() && lost > retry.LostDeliveriesMax:
		msg = fmt.Sprintf("%d of its deliveries ended with no word from any worker (the worker died or hung each time)", lost)
	case blamed >= retry.LostDeliveriesMax:
		msg = fmt.Sprintf("%d of its deliveries ended with no word from any worker while it ran alone in its worker (the worker died or hung each time; %d lost in all)",
			blamed, lost)
	case lost > lostMax:
		msg = fmt.Sprintf("%d of its deliveries ended with no word from any worker, %d of them while it ran alone in its worker", lost, blamed)
	default:
		return nil
	}
	return &retry.Error{Class: retry.ClassProgramming, TypeName: "PoisonRecord", Message: msg}
}

// aloneState is the state that says d runs alone: every earlier delivery
// accounted for, this one not yet (lost, it is the record's).
func (d *delivery) aloneState() *broker.RecordState {
	st := d.nextState(nil)
	st.Handled = d.n - 1
	st.Alone = d.n
	return st
}

// alone is the step before a suspect's session: it takes its process's
// place for a suspect and writes that this delivery runs alone, or parks
// the record while another suspect runs. d.alone is set while d holds the
// place (handle gives it back when the delivery is done).
func (jr *jobRunner) alone(ctx context.Context, d *delivery) verdict {
	if !d.runsAlone() || d.lost() < AloneAfterLost {
		return verdict{}
	}
	p := jr.p
	select {
	case p.suspect <- struct{}{}:
	default:
		return verdict{kind: verdictSuspect}
	}
	st := d.aloneState()
	_, err := jr.untilAnswered(ctx, "state", "KV_"+broker.BucketAttempts, func(ctx context.Context) error {
		return p.b.SaveState(ctx, d.job, d.action.Name, d.env.ID, st)
	})
	if err != nil {
		<-p.suspect
		return verdict{kind: verdictAbandon} // stopping: the record is redelivered after AckWait
	}
	d.state, d.alone = st, true
	p.log.Info().Str("job", d.job).Str("action", d.action.Name).Str("record", d.env.ID).Int("lost", d.lost()).Int("blamed", d.blamed()).
		Msg("a record lost with its worker twice or more runs alone in this worker: if the worker dies now, the record is to blame")
	return verdict{}
}
