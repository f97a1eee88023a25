package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// Reads that any replica answers. Every other read of a job goes to its
// bucket's leader (leaderget.go), which does not answer while it is cut
// off, until the others elect a new one (seconds). A status that must
// answer meanwhile reads the jobs with a batched direct get instead
// ($JS.API.DIRECT.GET with multi_last, nats-server 2.11 and later), which
// any replica answers once it is nearly caught up: it may miss a change of
// the last moments, and says that it was read so (JobsFromReplica).

// directBatchMax is the most entries one batched direct get returns.
const directBatchMax = 10000

// JobsFromReplica reads every job (id "") or job id from whichever
// replica of JETPOOL_JOBS and JETPOOL_JOB_STATE answers first.
func (b *Broker) JobsFromReplica(ctx context.Context, id string) ([]*Job, error) {
	key := ">"
	if id != "" {
		key = id
	}
	specs, err := b.lastPerSubject(ctx, "KV_"+BucketJobs, "$KV."+BucketJobs+"."+key)
	if err != nil {
		return nil, err
	}
	states, err := b.lastPerSubject(ctx, "KV_"+BucketJobState, "$KV."+BucketJobState+"."+key)
	if err != nil {
		return nil, err
	}
	var jobs []*Job
	for subject, m := range specs {
		k := strings.TrimPrefix(subject, "$KV."+BucketJobs+".")
		var j Job
		if err := json.Unmarshal(m.Data, &j); err != nil {
			return nil, fmt.Errorf("job %s: corrupt entry: %w", k, err)
		}
		if st, ok := states["$KV."+BucketJobState+"."+k]; ok {
			var s jobState
			if err := json.Unmarshal(st.Data, &s); err != nil {
				return nil, fmt.Errorf("job %s: corrupt state entry: %w", k, err)
			}
			j.apply(s)
		}
		jobs = append(jobs, &j)
	}
	if id != "" && len(jobs) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrJobNotFound, id)
	}
	return jobs, nil
}

// lastPerSubject is the last message of each subject of stream that
// filter matches, by subject, deleted and purged KV entries left out.
func (b *Broker) lastPerSubject(ctx context.Context, stream, filter string) (map[string]*nats.Msg, error) {
	inbox := b.NC.NewRespInbox()
	ch := make(chan *nats.Msg, 256)
	sub, err := b.NC.ChanSubscribe(inbox, ch)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	req, err := json.Marshal(map[string]any{"multi_last": []string{filter}, "batch": directBatchMax})
	if err != nil {
		return nil, err
	}
	if err := b.NC.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	out := map[string]*nats.Msg{}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("stream %s: read from a replica: %w", stream, ctx.Err())
		case m := <-ch:
			switch status := m.Header.Get("Status"); status {
			case "":
			case "204": // the end of the batch
				return out, nil
			case "404":
				return out, nil // nothing matches
			case "503":
				return nil, fmt.Errorf("stream %s: read from a replica: %w", stream, nats.ErrNoResponders)
			default:
				return nil, fmt.Errorf("stream %s: read from a replica: %s %s", stream, status, m.Header.Get("Description"))
			}
			if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
				continue
			}
			subject := m.Header.Get("Nats-Subject")
			if subject == "" {
				return nil, errors.New("stream " + stream + ": read from a replica: an answer without its subject")
			}
			out[subject] = m
			if len(out) >= directBatchMax {
				return nil, fmt.Errorf("stream %s: more than %d entries: not read from a replica", stream, directBatchMax)
			}
		}
	}
}
