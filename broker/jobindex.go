package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketJobIndex indexes jobs by their workflow: one key
// "<definition key>.<job>" per workflow a job has run (its first, and each
// revision), so that a run of a workflow finds the jobs that run it
// (dispatcher.Matching) by listing one key prefix, never every job. Only
// dispatchers write it and read it; it is made by the first that does, so
// a worker's topology never includes it.
const BucketJobIndex = "JETPOOL_JOB_INDEX"

// IndexedJobsMax bounds the jobs one lookup of the index returns.
const IndexedJobsMax = 100

func (b *Broker) jobIndexConfig() jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{Bucket: BucketJobIndex, Description: "jetpool: jobs by the definition of their workflow",
		History: 1, Replicas: b.replicas(), Storage: jetstream.FileStorage}
}

// jobIndex is the index bucket; create makes it when it is not there yet
// (a lookup does not: no index, no job to find).
func (b *Broker) jobIndex(ctx context.Context, create bool) (jetstream.KeyValue, error) {
	b.mu.Lock()
	kv, ok := b.kv[BucketJobIndex]
	b.mu.Unlock()
	if ok {
		return kv, nil
	}
	var err error
	if create {
		kv, err = b.ensureBucket(ctx, b.jobIndexConfig())
	} else {
		kv, err = b.JS.KeyValue(ctx, BucketJobIndex)
	}
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.kv[BucketJobIndex] = kv
	b.mu.Unlock()
	return kv, nil
}

// IndexJob records that job runs the workflow whose definition key is def
// (a token: letters and digits).
func (b *Broker) IndexJob(ctx context.Context, def, job string) error {
	kv, err := b.jobIndex(ctx, true)
	if err != nil {
		return fmt.Errorf("index job %s: %w", job, err)
	}
	v := fmt.Sprintf(`{"job":%q,"at":%q}`, job, time.Now().UTC().Format(time.RFC3339))
	if err := putAnswered(ctx, kv, def+"."+job, []byte(v)); err != nil {
		return fmt.Errorf("index job %s: %w", job, err)
	}
	return nil
}

// IndexedJobs returns the jobs indexed under def, at most IndexedJobsMax;
// none when nothing was ever indexed. A job may have been deleted since
// (its entry is gone): callers look each up.
func (b *Broker) IndexedJobs(ctx context.Context, def string) ([]string, error) {
	kv, err := b.jobIndex(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	kl, err := kv.ListKeysFiltered(ctx, def+".*")
	if err != nil {
		return nil, err
	}
	defer func() { _ = kl.Stop() }()
	var jobs []string
	for k := range kl.Keys() {
		jobs = append(jobs, strings.TrimPrefix(k, def+"."))
		if len(jobs) == IndexedJobsMax {
			break
		}
	}
	return jobs, nil
}

// UnindexJob removes the index entry of job under def (a job the lookup
// found gone).
func (b *Broker) UnindexJob(ctx context.Context, def, job string) error {
	kv, err := b.jobIndex(ctx, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return kv.Purge(ctx, def+"."+job)
}

// unindexJob removes every index entry of job (DeleteJob).
func (b *Broker) unindexJob(ctx context.Context, job string) error {
	if _, err := b.jobIndex(ctx, false); errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	_, err := b.purgeSubject(ctx, "KV_"+BucketJobIndex, "$KV."+BucketJobIndex+".*."+job)
	return err
}
