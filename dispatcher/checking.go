package dispatcher

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// errCheckFirst ends a dispatch that publishes while it validates
// (dispatchChecking) once the input is not found good all through: what
// it published is purged, and the input is checked whole before anything
// is published again.
var errCheckFirst = errors.New("check the input first")

// checking is what a dispatch that validates as it publishes learns of
// the input on the way, for what only the whole input tells: an id used
// twice, an empty file, a reference no record or earlier action answers
// (workflow.CheckRefs).
type checking struct {
	d       *Dispatcher
	job     *broker.Job // leased by this dispatch
	renewed time.Time   // the lease's last renewal
	seed    maphash.Seed
	sums    []uint64        // each record id's hash
	fields  map[string]bool // the first record's
	records int64
}

func (c *checking) add(rec Record) {
	if c.records == 0 {
		// Every record has every field a prompt reads from the records
		// (checkFields refused it otherwise): the first one's fields are
		// enough for the references into earlier actions' outputs.
		c.fields = map[string]bool{}
		rec.eachKey(func(k string) {
			if len(c.fields) < FieldsSeenMax {
				c.fields[strings.Clone(k)] = true // k is a view of the reader's buffer
			}
		})
	}
	c.records++
	c.sums = append(c.sums, maphash.String(c.seed, rec.ID))
}

// good reports whether the whole input passed: at least one record, every
// field a prompt reads present in some record, no record id used twice
// (up to a hash of the ids: two equal hashes send the input to CheckInput,
// which tells a collision from a duplicate).
func (c *checking) good(wf *workflow.Workflow) bool {
	if c.records == 0 {
		return false
	}
	if len(c.fields) > 0 && len(c.fields) < FieldsSeenMax && wf.CheckRefs(c.fields) != nil {
		return false
	}
	slices.Sort(c.sums)
	for i := 1; i < len(c.sums); i++ {
		if c.sums[i] == c.sums[i-1] {
			return false
		}
	}
	return true
}

// The lease of a dispatch that publishes a job as it validates it
// (broker.Job.Lease). Variables for the tests.
var (
	// leaseRenew is how often the owner renews it.
	leaseRenew = time.Second
	// leaseFence: an owner that could not renew it for this long publishes
	// nothing more (it stops at its next record, and ends); well within
	// leaseIdle, so that no record of it is sent once another may take the
	// job over.
	leaseFence = 5 * time.Second
	// leaseIdle is how long a dispatch that finds the job leased watches
	// the lease unrenewed, on its own clock, before it takes the job over.
	leaseIdle = 15 * time.Second
	// leaseLook is how often it looks meanwhile.
	leaseLook = 250 * time.Millisecond
)

// errLeaseLost ends a dispatch whose job another dispatch took over.
var errLeaseLost = errors.New("another dispatch took the job over (this one could not renew its lease in time): that one publishes its records")

// errFenced ends the publishing of a dispatch that could not renew its
// lease for leaseFence (the store did not answer): it may have been taken
// over, or not; checkingPass finds out which.
var errFenced = errors.New("this dispatch could not renew its lease: the store did not answer in time")

// confirmFor bounds how long a fenced dispatch tries to learn whether its
// lease is still its own (checkingPass).
const confirmFor = 30 * time.Second

// dispatchChecking dispatches a new job reading its input once: each
// record is validated and published in one pass (checkingPass) while the
// job is JobChecking and has no work consumer, so that no worker sees a
// record until the whole input is found good; then the consumer is made
// and the job runs. A job found leased by a dispatch that is gone is taken
// over (takeOver). Any other job that exists already (a resumed dispatch,
// a job run before) ends it with errCheckFirst: the careful way (CheckInput,
// then publish) is theirs.
//
// An input found not good on the way (a bad line, a missing field, a
// duplicate id) ends the pass at once: the job is deleted with what was
// published of it, nothing of it having run, and errCheckFirst sends the
// dispatch the careful way, which refuses the input with every bad line
// named, or dead-letters them (SkipBad), or keeps the first of each id
// (DuplicatesFirst), as a dispatch always did.
func (d *Dispatcher) dispatchChecking(ctx context.Context, wf *workflow.Workflow, opts Options) (*Result, error) {
	if err := checkWorkflowSize(wf, opts.MaxPayload); err != nil {
		return nil, &RefusedError{Err: err}
	}
	// The reader's own errors (an unknown format, a CSV header) before
	// there is a job.
	r, err := Open(opts.Input, opts.Format, opts.IDField)
	if err != nil {
		return nil, &RefusedError{Err: err}
	}
	r.Close()
	id, hashed := opts.JobID, ""
	if id == "" {
		h, err := hashFile(opts.Input)
		if err != nil {
			return nil, &RefusedError{Err: err}
		}
		hashed = h
		if id, err = jobID(wf, opts, h); err != nil {
			return nil, &RefusedError{Err: err}
		}
	} else if err := broker.CheckJobID(id); err != nil {
		return nil, &RefusedError{Err: err}
	}
	opts.JobID = id
	switch j, rev, err := d.B.GetJob(ctx, id); {
	case err == nil && !j.Lease.IsZero() && !j.Dispatched:
		return d.takeOver(ctx, wf, opts, j, rev, hashed)
	case err == nil:
		return nil, errCheckFirst
	case !errors.Is(err, broker.ErrJobNotFound):
		return nil, err
	}
	if fresh, err := d.B.JobUnseen(ctx, id); err != nil || !fresh {
		return nil, cmp.Or(err, errCheckFirst)
	}
	enc, actions, err := spec(wf)
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	job := &broker.Job{ID: id, Created: now, MaxCost: wf.MaxCost, Workflow: enc, Actions: actions,
		Input: opts.Input, MaxDeliver: -1, Status: broker.JobChecking, Nonce: newNonce(), Lease: now, StartAt: startAt(opts),
		Priority: cmp.Or(opts.Priority, wf.Priority)}
	if err := d.B.PutJob(ctx, job); err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	d.index(ctx, wf, id) // match.go: a run of an edited input finds it
	return d.checkingPass(ctx, wf, opts, job, hashed)
}

// takeOver takes over job, found leased (published as validated by
// another dispatch, and not served yet), once its lease has gone unrenewed
// for leaseIdle on this process's clock (no clock of another machine is
// read): a new Nonce and lease, every record of it purged, and the input
// published again by checkingPass. A lease renewed meanwhile is an error
// (that dispatch is alive: wait for it to end); a job its owner deleted
// meanwhile is errCheckFirst (a new job).
//
// What the old owner may still send (writes buffered in a process that
// was stopped, not dead) carries the old nonce, and workers drop it
// (broker.HeaderNonce); the old owner itself fails its next renewal and
// ends with errLeaseLost.
//
// hashed, when set, is the content hash the job id was made of.
func (d *Dispatcher) takeOver(ctx context.Context, wf *workflow.Workflow, opts Options, job *broker.Job, rev uint64, hashed string) (*Result, error) {
	d.Log.Warn().Str("job", job.ID).Msgf("job %s is being published by another dispatch that has not finished: waiting %s to see whether it is still alive", job.ID, leaseIdle)
	idle := time.Now()
	for time.Since(idle) < leaseIdle {
		if err := (retry.SystemClock{}).Sleep(ctx, leaseLook); err != nil {
			return nil, err
		}
		j, r, err := d.B.GetJob(ctx, job.ID)
		switch {
		case errors.Is(err, broker.ErrJobNotFound):
			return nil, errCheckFirst
		case err != nil:
			return nil, err
		case r != rev:
			return nil, fmt.Errorf("job %s is being dispatched by another process, which renewed its lease a moment ago (status %s): wait for that dispatch to end, then run this again", job.ID, j.Status)
		}
	}
	enc, actions, err := spec(wf)
	if err != nil {
		return nil, err
	}
	old, now, taken := job.Nonce, time.Now().UTC(), false
	job, err = d.B.UpdateJobSpec(ctx, job.ID, func(j *broker.Job) bool {
		if j.Nonce != old || j.Dispatched || j.Lease.IsZero() {
			return false
		}
		j.Nonce, j.Lease, j.Workflow, j.Actions, j.Input = newNonce(), now, enc, actions, opts.Input
		taken = true
		return true
	})
	switch {
	case errors.Is(err, broker.ErrJobNotFound):
		return nil, errCheckFirst
	case err != nil:
		return nil, err
	case !taken:
		return nil, fmt.Errorf("job %s was taken over by another dispatch a moment ago: wait for that one to end, then run this again", job.ID)
	}
	purged, err := d.B.PurgeWork(ctx, job.ID)
	if err != nil {
		return nil, err
	}
	d.Log.Warn().Str("job", job.ID).Uint64("purged", purged).Msg("took the job over from a dispatch that is gone: publishing it again from the start")
	opts.Checked, opts.checkedHash, opts.bad, opts.dups = false, "", nil, nil
	return d.checkingPass(ctx, wf, opts, job, hashed)
}

// checkingPass publishes every record of the input to job, which this
// dispatch leases (Job.Lease: Nonce is its own), validating each as it goes
// and renewing the lease; then, the input being good all through (and, when
// hashed is set, the file the one its job id was made of), it serves the
// job: the consumer, the counters, the job running. An input not good ends
// it with errCheckFirst, the job deleted with what was published of it.
// Any other end deletes the job too while the lease is surely still its
// own; a job it has lost is left to the new owner (errLeaseLost).
func (d *Dispatcher) checkingPass(ctx context.Context, wf *workflow.Workflow, opts Options, job *broker.Job, hashed string) (*Result, error) {
	c := &checking{seed: maphash.MakeSeed(), d: d, job: job, renewed: time.Now()}
	res, err := d.publish(ctx, wf, job, opts, true, c)
	if err == nil && (!c.good(wf) || hashed != "" && res.inputHash != hashed) {
		// (A file that changed after it was hashed for its job id: the
		// careful way names the job after what it publishes.)
		err = errCheckFirst
	}
	if err == nil {
		err = c.release(ctx, res)
	}
	if err != nil && !errors.Is(err, errLeaseLost) && time.Since(c.renewed) >= leaseFence {
		// Late renewals are not a lost lease: the job is still this
		// dispatch's unless another took it over (its nonce), and then it
		// is forgotten below rather than left checking, served by nobody.
		if cerr := c.confirm(ctx); cerr != nil {
			if errors.Is(cerr, errLeaseLost) {
				return nil, fmt.Errorf("job %s: %w", job.ID, errLeaseLost)
			}
			return nil, errors.Join(err, fmt.Errorf("job %s is left checking, its lease unconfirmed (%w): run the same dispatch again, which takes it over", job.ID, cerr))
		}
	}
	if err != nil {
		if errors.Is(err, errLeaseLost) {
			return nil, fmt.Errorf("job %s: %w", job.ID, errLeaseLost)
		}
		// Nothing of it ran (no consumer): forget it whole.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if derr := d.B.ForgetNewJob(dctx, job.ID); derr != nil {
			return nil, errors.Join(err, fmt.Errorf("job %s: what was published of it could not be removed (the next dispatch of it takes it over, or: jetpool job delete %s): %w", job.ID, job.ID, derr))
		}
		if errors.Is(err, errCheckFirst) {
			d.Log.Debug().Str("job", job.ID).Msg("the input is not good all through: checking it before publishing")
		}
		if fe := (*FileError)(nil); errors.As(err, &fe) {
			return nil, &RefusedError{Err: err} // a file that cannot be read on: nothing of it ran
		}
		return nil, err
	}
	j, err := d.serve(ctx, job)
	if err != nil {
		return nil, err
	}
	res.Job = j
	d.Log.Info().Str("job", job.ID).Int64("published", res.Published).Msg("dispatched")
	return res, nil
}

// serve makes a dispatched job's counters and work consumer and sets it
// running: workers take its records from then on.
func (d *Dispatcher) serve(ctx context.Context, job *broker.Job) (*broker.Job, error) {
	if err := d.B.EnsureCounters(ctx, job); err != nil {
		return nil, err
	}
	if _, err := d.B.EnsureConsumerFrom(ctx, job.ID, job.MaxDeliver, job.StartAt); err != nil {
		return nil, err
	}
	return d.B.UpdateJob(ctx, job.ID, func(j *broker.Job) bool {
		if j.Status != broker.JobChecking {
			return false
		}
		j.Status = broker.JobRunning
		return true
	})
}

// startAt is the scheduled start a new job keeps (UTC; zero: none).
func startAt(opts Options) time.Time {
	if opts.StartAt.IsZero() {
		return time.Time{}
	}
	return opts.StartAt.UTC()
}

// renew renews the lease when it is due (looked at every 256 records,
// and before every record once the fence is near); an owner that could
// not renew it for leaseFence publishes no more.
func (c *checking) renew(ctx context.Context) error {
	if due := time.Since(c.renewed); due < leaseRenew || c.records&255 != 0 && due < leaseFence/2 {
		return nil
	}
	err := c.update(ctx, func(j *broker.Job) { j.Lease = time.Now().UTC() })
	switch {
	case err == nil:
		c.renewed = time.Now()
	case errors.Is(err, errLeaseLost):
		return err
	case time.Since(c.renewed) >= leaseFence:
		return fmt.Errorf("%w: %w", errFenced, err)
	}
	return nil // tried again at the next record
}

// confirm renews the lease, trying for confirmFor: nil when it is still
// this dispatch's, errLeaseLost when another took the job over.
func (c *checking) confirm(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmFor)
	defer cancel()
	for {
		err := c.update(ctx, func(j *broker.Job) { j.Lease = time.Now().UTC() })
		if err == nil {
			c.renewed = time.Now()
			return nil
		}
		if errors.Is(err, errLeaseLost) {
			return err
		}
		if serr := (retry.SystemClock{}).Sleep(ctx, leaseRenew); serr != nil {
			return err
		}
	}
}

// release ends the lease: the job is dispatched with res's records. It
// holds however late the renewals were, as long as no other dispatch took
// the job over (update checks the nonce in the same write).
func (c *checking) release(ctx context.Context, res *Result) error {
	return c.update(ctx, func(j *broker.Job) {
		j.Lease, j.Dispatched, j.Total, j.InputHash = time.Time{}, true, res.Published, res.inputHash
	})
}

// update changes the job's entry with fn if this dispatch still owns it.
func (c *checking) update(ctx context.Context, fn func(*broker.Job)) error {
	owned := false
	_, err := c.d.B.UpdateJobSpec(ctx, c.job.ID, func(j *broker.Job) bool {
		if owned = j.Nonce == c.job.Nonce && !j.Lease.IsZero(); owned {
			fn(j)
		}
		return owned
	})
	if err == nil && !owned || errors.Is(err, broker.ErrJobNotFound) {
		return errLeaseLost
	}
	return err
}

// spec is what a job's entry keeps of wf: its encoding and its actions'
// names.
func spec(wf *workflow.Workflow) ([]byte, []string, error) {
	enc, err := wf.Encode()
	if err != nil {
		return nil, nil, err
	}
	actions := make([]string, len(wf.Actions))
	for i, a := range wf.Actions {
		actions[i] = a.Name
	}
	return enc, actions, nil
}

func newNonce() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// hashFile is the content hash of the file at path, as Reader.ContentHash
// gives it once the whole file is read: a read at the page cache's speed.
func hashFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := xxhash.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
