package broker

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// A consumer of one replica (the ephemeral ones that count and read) is
// placed by the servers on any member of its stream, at random
// (nats-server createGroupForConsumer), and it counts and delivers what
// that member's copy holds. A member just restarted can be catching up for
// a minute (TestChaosLeaderLoss: "stream catching up" on /healthz for 90 s
// after a SIGKILL), and a count or an export read there is behind: a job
// looks unfinished, an export misses records. So such a consumer is used
// only on the stream's leader or on a member the leader reports current;
// else it is made again, elsewhere (placeTries times).
const placeTries = 8

// onCurrentMember reports whether the consumer ci describes is hosted by a
// member of stream whose copy is current: the leader, or a replica the
// leader reports current (a few entries behind at most, as any follower
// under load: the next count has them). A single server, or a stream the
// leader of which does not answer, counts as current (nothing better to
// read from).
func (b *Broker) onCurrentMember(ctx context.Context, stream string, ci *jetstream.ConsumerInfo) bool {
	if ci == nil || ci.Cluster == nil || ci.Cluster.Leader == "" {
		return true
	}
	s, err := b.JS.Stream(ctx, stream)
	if err != nil {
		return true
	}
	info := s.CachedInfo()
	if info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == ci.Cluster.Leader {
		return true
	}
	for _, r := range info.Cluster.Replicas {
		if r.Name == ci.Cluster.Leader {
			return r.Current && !r.Offline
		}
	}
	return false
}
