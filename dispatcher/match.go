package dispatcher

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// Definition is what makes two workflows run a job alike: the workflow as
// it runs (workflow.Definition: not where it was written), less its
// budget, which is not part of a job's identity (a rerun with another
// --max-cost is the same job).
func Definition(wf *workflow.Workflow) ([]byte, error) {
	c := *wf
	c.MaxCost = 0
	return c.Definition()
}

// DefinitionKey is the job index's key of a workflow (broker.IndexJob): a
// hash of its Definition.
func DefinitionKey(wf *workflow.Workflow) (string, error) {
	def, err := Definition(wf)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(def)
	return hex.EncodeToString(sum[:16]), nil
}

// SameDefinition reports whether two workflows run a job alike.
func SameDefinition(a, b *workflow.Workflow) (bool, error) {
	da, err := Definition(a)
	if err != nil {
		return false, err
	}
	db, err := Definition(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(da, db), nil
}

// index records job under wf in the job index. The index only lets a later
// run find the job (Matching): a dispatch it fails is not failed for it.
func (d *Dispatcher) index(ctx context.Context, wf *workflow.Workflow, job string) {
	if err := IndexJob(ctx, d.B, wf, job); err != nil {
		d.Log.Warn().Str("job", job).Err(err).Msg("job not indexed: a run of an edited input will not find it (use --job)")
	}
}

// IndexJob records job under wf in the job index: a new job, and a job's
// new revision.
func IndexJob(ctx context.Context, b *broker.Broker, wf *workflow.Workflow, job string) error {
	key, err := DefinitionKey(wf)
	if err != nil {
		return err
	}
	return b.IndexJob(ctx, key, job)
}

// DerivedJobID is the job id a dispatch of opts.Input gives when no JobID
// is set: the workflow's name and a hash of the workflow and the input's
// content. It reads the whole input.
func DerivedJobID(wf *workflow.Workflow, opts Options) (string, error) {
	h, err := hashFile(opts.Input)
	if err != nil {
		return "", err
	}
	opts.JobID = ""
	return jobID(wf, opts, h)
}

// MatchSample is how many records of an input Matching looks up in each job
// that runs the same workflow.
const MatchSample = 256

// Match is a job that runs a workflow exactly (its current revision) and
// has records of an input.
type Match struct {
	Job *broker.Job
	// Sampled is how many records of the input were looked up in the job
	// (MatchSample at most, spread over the whole input); Shared how many
	// of them the job has (a result at its first action).
	Sampled, Shared int
	// SameInput: the job was last dispatched from the same input file (its
	// path) and has records queued or in flight, which may have no result
	// yet.
	SameInput bool
}

// Matching returns the jobs whose current workflow is wf (Definition) and
// that have records of opts.Input (or were dispatched from the same file
// and are still at work on it), the most shared first, then the newest:
// the jobs a run of an edited input may continue instead of paying for
// every record again. Jobs are found in the job index (one key prefix, at
// most broker.IndexedJobsMax), never by reading every job; only jobs that
// were fully dispatched count. It reads the input once, for a sample of its
// record ids, only when some job runs wf.
func Matching(ctx context.Context, b *broker.Broker, wf *workflow.Workflow, opts Options) ([]Match, error) {
	key, err := DefinitionKey(wf)
	if err != nil {
		return nil, err
	}
	ids, err := b.IndexedJobs(ctx, key)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	var jobs []*broker.Job
	for _, id := range ids {
		j, _, err := b.GetJob(ctx, id)
		if errors.Is(err, broker.ErrJobNotFound) {
			_ = b.UnindexJob(ctx, key, id) // deleted since
			continue
		}
		if err != nil {
			return nil, err
		}
		if !j.Dispatched || len(j.Actions) == 0 {
			continue
		}
		raw, _ := j.WorkflowOf(j.Revision())
		cur, err := workflow.Decode(raw)
		if err != nil {
			continue // a workflow this version cannot read is no match
		}
		if same, err := SameDefinition(cur, wf); err != nil || !same {
			continue // revised since (retry --workflow): indexed under its new workflow too
		}
		jobs = append(jobs, j)
	}
	if len(jobs) == 0 {
		return nil, nil
	}
	sample, err := sampleIDs(opts, MatchSample)
	if err != nil {
		return nil, err
	}
	var out []Match
	for _, j := range jobs {
		m := Match{Job: j, Sampled: len(sample)}
		if filepath.Clean(j.Input) == filepath.Clean(opts.Input) {
			// A file of the same name may hold another day's records:
			// only a job still at work on it counts without a record
			// in common (its records may have no result yet).
			p, err := b.Backlog(ctx, j.ID)
			if err != nil {
				return nil, err
			}
			m.SameInput = p.Queued+uint64(p.AckPending) > 0
		}
		for _, id := range sample {
			r, _, err := b.LastOutcome(ctx, j.ID, j.Actions[0], id)
			if err != nil {
				return nil, err
			}
			if r != nil {
				m.Shared++
			}
		}
		if m.Shared > 0 || m.SameInput {
			out = append(out, m)
		}
	}
	slices.SortStableFunc(out, func(a, b Match) int {
		return cmp.Or(cmp.Compare(b.Shared, a.Shared), b.Job.Created.Compare(a.Job.Created))
	})
	return out, nil
}

// sampleIDs is up to n record ids of the input, spread over all of it
// (reservoir sampling, seeded: the same input gives the same sample). Bad
// lines are left out.
func sampleIDs(opts Options, n int) ([]string, error) {
	r, err := Open(opts.Input, opts.Format, opts.IDField)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	r.views, r.idOnly = true, true // ids alone: the dispatch validates the records
	rng := rand.New(rand.NewPCG(1, 2))
	var out []string
	seen := 0
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		var le *LineError
		if errors.As(err, &le) {
			continue
		}
		if err != nil {
			return nil, err
		}
		seen++
		switch {
		case len(out) < n:
			out = append(out, rec.ID)
		default:
			if k := rng.IntN(seen); k < n {
				out[k] = rec.ID
			}
		}
	}
}
