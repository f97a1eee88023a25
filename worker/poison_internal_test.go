package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// A record's life as the store keeps it, delivery after delivery: which
// losses are its own, and when it is poison. Each step is one delivery:
// "lost" (no word: the worker died with it, the record not alone), "alone
// lost" (the record ran alone and its worker died), "parked" (another
// suspect ran), "alone ok" (it ran alone and was handed back, a retry say).
func TestPoisonCounting(t *testing.T) {
	t.Parallel()
	online := &workflow.Action{Name: "act"}
	batch := &workflow.Action{Name: "act", Mode: workflow.ModeBatch}
	type step string
	for _, tc := range []struct {
		name   string
		action *workflow.Action
		steps  []step
		lost   int
		blamed int
		alone  bool // the next delivery runs alone
		poison string
	}{
		{name: "lost once: not a suspect", action: online, steps: []step{"lost"}, lost: 1},
		{name: "lost twice beside a killer: a suspect, not to blame", action: online, steps: []step{"lost", "lost"}, lost: 2, alone: true},
		{name: "an innocent suspect runs alone and is handed back", action: online, steps: []step{"lost", "lost", "alone ok"}, lost: 2, alone: true},
		{name: "parked while another suspect runs: not a loss", action: online, steps: []step{"lost", "lost", "parked", "parked"}, lost: 2, alone: true},
		{name: "lost read ahead again and again, never alone: not poison yet", action: online,
			steps: []step{"lost", "lost", "lost", "lost", "lost", "lost"}, lost: 6, alone: true},
		{name: "the killer: lost alone three times", action: online,
			steps: []step{"lost", "lost", "alone lost", "alone lost", "alone lost"}, lost: 5, blamed: 3, alone: true,
			poison: "3 of its deliveries ended with no word from any worker while it ran alone in its worker (the worker died or hung each time; 5 lost in all)"},
		{name: "two losses alone are not enough", action: online,
			steps: []step{"lost", "lost", "alone lost", "parked", "alone lost", "alone ok"}, lost: 4, blamed: 2, alone: true},
		{name: "lost more than the cap, never to blame: let go", action: online,
			steps: []step{"lost", "lost", "lost", "lost", "lost", "lost", "lost", "lost", "lost", "lost", "lost", "lost", "lost"}, lost: 13, alone: true,
			poison: "13 of its deliveries ended with no word from any worker, 0 of them while it ran alone in its worker"},
		{name: "a batch-mode record counts every loss", action: batch,
			steps: []step{"lost", "lost", "lost", "lost"}, lost: 4,
			poison: "4 of its deliveries ended with no word from any worker (the worker died or hung each time)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var st *broker.RecordState
			for i, s := range tc.steps {
				d := &delivery{action: tc.action, n: i + 1, state: st}
				switch s {
				case "lost": // the state stays as it was
				case "parked", "alone ok":
					if s == "alone ok" {
						d.state = d.aloneState()
					}
					st = d.nextState(nil)
				case "alone lost":
					st = d.aloneState()
				}
			}
			d := &delivery{action: tc.action, n: len(tc.steps) + 1, state: st}
			require.Equal(t, tc.lost, d.lost(), "lost")
			require.Equal(t, tc.blamed, d.blamed(), "blamed")
			require.Equal(t, tc.alone, d.runsAlone() && d.lost() >= AloneAfterLost, "runs alone")
			e := d.poisoned()
			if tc.poison == "" {
				require.Nil(t, e)
				return
			}
			require.NotNil(t, e)
			require.Equal(t, retry.ClassProgramming, e.Class)
			require.Equal(t, tc.poison, e.Message)
		})
	}
}
