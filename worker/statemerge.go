package worker

import (
	"slices"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/provider"
)

// mergeState is the state to write when a delivery's next state (ours,
// made from base: the state it read, or last wrote) meets a state stored
// since by another delivery of the record: a twin that parked, or counted
// a lapsed claim's calls, while this delivery's worker was stopped. What
// this delivery adds is added to the stored state: its attempts, the
// deliveries, hand-backs and waits it spent, the usage and cost its
// answered calls were billed, its parked answer; a delivery cut short that
// this one opened or spent is ours. Counts of deliveries seen are the
// larger: each delivery counts the ones before it.
// A stored state of a later replay generation wins (nil: write nothing);
// one of an earlier generation, or none, is replaced.
func mergeState(stored, base, ours *broker.RecordState) *broker.RecordState {
	switch {
	case stored == nil || stored.Replays < ours.Replays:
		return ours
	case stored.Replays > ours.Replays:
		return nil
	}
	b := base
	if b == nil || b.Replays != ours.Replays {
		b = &broker.RecordState{Replays: ours.Replays}
	}
	out := *stored
	added := ours.Attempts[min(len(b.Attempts), len(ours.Attempts)):]
	out.Attempts = append(slices.Clip(stored.Attempts), added...)
	out.Deliveries += ours.Deliveries - b.Deliveries
	out.HandBacks += ours.HandBacks - b.HandBacks
	out.Waits += ours.Waits - b.Waits
	out.Waited += ours.Waited - b.Waited
	u := providerUsage(stored.Usage)
	u.Add(providerUsage(ours.Usage))
	u.Add(negUsage(providerUsage(b.Usage)))
	out.Usage = resultUsage(u)
	out.Cost += ours.Cost - b.Cost
	if ours.OpenCalls != b.OpenCalls || ours.OpenRound != b.OpenRound {
		out.OpenCalls, out.OpenRound = ours.OpenCalls, ours.OpenRound
	}
	out.Alone = max(stored.Alone, ours.Alone)
	out.Blamed = max(stored.Blamed, ours.Blamed)
	out.Handled = max(stored.Handled, ours.Handled)
	out.Lost = max(stored.Lost, ours.Lost)
	out.TwinWaited = stored.TwinWaited || ours.TwinWaited
	if ours.Answer != nil {
		out.Answer = ours.Answer
	}
	return &out
}

func negUsage(u provider.Usage) provider.Usage {
	return provider.Usage{InputTokens: -u.InputTokens, OutputTokens: -u.OutputTokens,
		CachedInputTokens: -u.CachedInputTokens, CacheWriteTokens: -u.CacheWriteTokens, ReasoningTokens: -u.ReasoningTokens}
}
