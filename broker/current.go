package broker

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/retry"
)

// A consumer of one replica (the ephemeral ones that count and read) is
// placed by the servers on any member of its stream, at random
// (nats-server createGroupForConsumer), and it counts and delivers what
// that member's copy holds. A member just restarted or thawed can be
// catching up for a while — and the leader may already report it
// "current" then: that is its raft log, not its stream's catch-up
// (TestChaosLookupReadsTheLeader read 0 of 300 results through one) — and a
// count or an export read there is behind: a job looks unfinished, an
// export misses records. So such a consumer is used only on the stream's
// leader: else it is made again, up to placeTries times, after a pause
// that grows (placePause). With three members each lands on the leader
// one time in three, so all 32 miss one count in 400,000 (eight tries
// missed one in 26, and a status poll during a cluster test failed so);
// the pause is for the servers' preference of members caught up with the
// meta leader, which under load can hold a consumer off the leader for a
// while. A read left off it has its end checked against the leader
// (ReadStream).
const placeTries = 32

// placePause waits before try (counted from 1) to place a consumer: not
// before the first two, then 1 ms, doubling to 32 ms.
func placePause(ctx context.Context, try int) error {
	if try <= 2 {
		return nil
	}
	return retry.SystemClock{}.Sleep(ctx, time.Millisecond<<min(try-3, 5))
}

// leaderView is the stream's leader's info, asked once for one count or
// one read (a stream info request, answered by the leader), when first
// needed: a single server's consumers never need it.
type leaderView struct {
	b      *Broker
	stream string
	info   *jetstream.StreamInfo
	err    error
}

func (b *Broker) leaderView(stream string) *leaderView { return &leaderView{b: b, stream: stream} }

// get is the leader's info, asked again while the stream cannot answer.
func (v *leaderView) get(ctx context.Context, wait time.Duration) (*jetstream.StreamInfo, error) {
	if v.info == nil && v.err == nil {
		_, v.err = untilAnswered(ctx, wait, 20*time.Millisecond, time.Second, notReady, func() {}, func() error {
			s, err := v.b.JS.Stream(ctx, v.stream)
			if err == nil {
				v.info = s.CachedInfo()
			}
			return err
		})
	}
	return v.info, v.err
}

// forget drops the info: the leader may have moved (a read that stalled).
func (v *leaderView) forget() { v.info, v.err = nil, nil }

// onLeader reports whether the consumer ci describes is hosted by the
// stream's leader (a single server's always is). A leader that cannot be
// asked is not known to host it.
func (v *leaderView) onLeader(ctx context.Context, ci *jetstream.ConsumerInfo) bool {
	on, _, err := v.placement(ctx, ci)
	return err == nil && on
}

// onCurrentMember is the weaker test for a job's durable counters, which
// are not made again for a count: the leader, or a replica the leader
// reports current (its raft log caught up; its stream may still be
// catching up, so a count there can be behind for as long as that takes,
// and is right after). A counter elsewhere is counted afresh on the leader.
func (v *leaderView) onCurrentMember(ctx context.Context, ci *jetstream.ConsumerInfo) bool {
	on, replica, err := v.placement(ctx, ci)
	return err == nil && (on || (replica != nil && replica.Current && !replica.Offline))
}

// placement says where ci's consumer is: on the stream's leader, or else on
// replica (nil: not a member the leader lists).
func (v *leaderView) placement(ctx context.Context, ci *jetstream.ConsumerInfo) (onLeader bool, replica *jetstream.PeerInfo, err error) {
	if ci == nil || ci.Cluster == nil || ci.Cluster.Leader == "" {
		return true, nil, nil // not clustered
	}
	info, err := v.get(ctx, noRespondersWait)
	if err != nil {
		return false, nil, err
	}
	if info.Cluster == nil || info.Cluster.Leader == ci.Cluster.Leader {
		return true, nil, nil
	}
	for _, r := range info.Cluster.Replicas {
		if r.Name == ci.Cluster.Leader {
			return false, r, nil
		}
	}
	return false, nil, nil
}
