package dispatcher

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"
	"strings"

	"github.com/jetpool/jetpool/workflow"
)

// How a dispatch treats a record id used more than once in its input
// (Options.Duplicates).
const (
	// DuplicatesError refuses the input, naming each later use and the line
	// of the first (DuplicatesDefault). --skip-bad does not cover it: a
	// duplicate is not a bad line, and dead-lettering it would write a
	// failed result under an id whose first record runs.
	DuplicatesError = "error"
	// DuplicatesFirst keeps the first record of each id and skips the
	// later ones, counting them (Checked.Duplicates).
	DuplicatesFirst   = "first"
	DuplicatesDefault = DuplicatesError
)

// FieldsSeenMax bounds the distinct top-level field names the validation
// pass collects (records with keys of their own, say a map of ids, would
// otherwise grow the set with the input). Past it the references of the
// prompts are checked against the records one by one only.
const FieldsSeenMax = 10000

// Checked is what the validation pass found in an input: everything a
// dispatch needs to know before it publishes.
type Checked struct {
	JobID       string
	Records     int64   // records to publish (later uses of a duplicate id left out)
	Bad         []error // refused lines (*LineError)
	DupErrs     []error // later uses of an id (DuplicatesError): always refused
	Duplicates  int64   // later uses of an id, skipped (DuplicatesFirst)
	ContentHash string  // of the input's bytes
	// dups maps each id used more than once to the line of its first use.
	dups map[string]int
}

// Apply makes opts carry what the check found, so that Dispatch reads the
// input once more only to publish it: each line's id is read, and nothing
// is validated again (the bad lines are known by their line); should the
// file change between the two reads, its content hash says so at the end.
func (c *Checked) Apply(opts *Options) {
	opts.JobID, opts.Checked, opts.dups = c.JobID, true, c.dups
	opts.checkedHash = c.ContentHash
	opts.bad = nil
	for _, err := range c.Bad {
		var le *LineError
		if errors.As(err, &le) && le.Line > 0 {
			if opts.bad == nil {
				opts.bad = map[int]*LineError{}
			}
			opts.bad[le.Line] = le
		}
	}
}

// DuplicateIDsError lists the later uses of record ids in an input.
type DuplicateIDsError struct{ Errs []error }

func (e *DuplicateIDsError) Error() string {
	return listErrors(e.Errs, "record id used more than once", "record ids used more than once",
		"nothing published (give each record its own id, or pass --duplicates first to keep the first record of each id)")
}

// CheckInput reads the whole input once, as Check does, and also checks
// every prompt's references against the fields the records have
// (workflow.CheckRefs: a typo such as .clasify costs no call) and finds
// record ids used more than once.
//
// Ids are compared as the text they are: a string exactly as written (" e "
// and "e" differ), a number as its JSON text; so 1 and "1" are the same id.
// A 10M-record input is not held as 10M ids: the pass keeps an 8-byte hash
// of each (80 MB for 10M), sorts them, and only when two are equal reads
// the file again, holding the ids of those hashes alone, to tell a
// duplicate from a collision and name the lines.
func CheckInput(wf *workflow.Workflow, opts Options) (*Checked, error) {
	if err := checkWorkflowSize(wf, opts.MaxPayload); err != nil {
		return nil, err
	}
	c := &Checked{}
	seed := maphash.MakeSeed()
	var sums []uint64
	fields := map[string]bool{}
	var missing []*LineError // lines lacking a field some prompt reads
	contentHash, err := eachRecord(wf, opts, func(rec Record, le *LineError) error {
		rec.eachKey(func(k string) {
			if !fields[k] && len(fields) < FieldsSeenMax {
				fields[strings.Clone(k)] = true // k is a view of the reader's buffer
			}
		})
		switch {
		case le != nil && le.field != "":
			missing = append(missing, le)
		case le != nil:
			c.Bad = append(c.Bad, le)
		default:
			c.Records++
			sums = append(sums, maphash.String(seed, rec.ID))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.ContentHash = contentHash
	if c.Records == 0 && len(c.Bad) == 0 && len(missing) == 0 {
		return nil, &LineError{File: opts.Input, Reason: "empty file: no records"}
	}
	if len(fields) > 0 && len(fields) < FieldsSeenMax {
		// A field no record has is the workflow's mistake, said once at
		// its line, not a bad line per record.
		if err := wf.CheckRefs(fields); err != nil {
			return nil, err
		}
	}
	for _, le := range missing {
		c.Bad = append(c.Bad, le)
	}
	slices.SortFunc(c.Bad, func(a, b error) int { return lineOf(a) - lineOf(b) })
	if err := c.duplicates(wf, opts, seed, sums); err != nil {
		return nil, err
	}
	if c.JobID, err = jobID(wf, opts, contentHash); err != nil {
		return nil, err
	}
	return c, nil
}

func lineOf(err error) int {
	var le *LineError
	if errors.As(err, &le) {
		return le.Line
	}
	return 0
}

// duplicates finds the ids used more than once, given the hash of every
// good record's id: a second pass, over the records whose hash is shared,
// only when some hash is.
func (c *Checked) duplicates(wf *workflow.Workflow, opts Options, seed maphash.Seed, sums []uint64) error {
	slices.Sort(sums)
	shared := map[uint64]bool{}
	for i := 1; i < len(sums); i++ {
		if sums[i] == sums[i-1] {
			shared[sums[i]] = true
		}
	}
	if len(shared) == 0 {
		return nil
	}
	type first struct {
		line int
		raw  string // the id field as written, when it says more than the id
	}
	firsts := map[string]first{}
	_, err := eachRecord(wf, opts, func(rec Record, le *LineError) error {
		if le != nil || !shared[maphash.String(seed, rec.ID)] {
			return nil
		}
		raw := idText(rec, opts.IDField)
		f, used := firsts[rec.ID]
		if !used {
			firsts[rec.ID] = first{line: rec.Line, raw: raw}
			return nil
		}
		if c.dups == nil {
			c.dups = map[string]int{}
		}
		c.dups[rec.ID] = f.line
		c.Records--
		if opts.Duplicates == DuplicatesFirst {
			c.Duplicates++
			return nil
		}
		reason := fmt.Sprintf("id %q already used at %s", rec.ID, (&Record{Line: f.line, rows: rec.rows}).where())
		if raw != f.raw {
			reason += fmt.Sprintf(" (there as %s, here as %s: ids are compared as text)", f.raw, raw)
		}
		c.DupErrs = append(c.DupErrs, &LineError{File: opts.Input, Line: rec.Line, rows: rec.rows, Reason: reason})
		return nil
	})
	return err
}

// idText is the id field of rec as written in the input (JSON), "" for an
// id that is a hash of the record.
func idText(rec Record, idField string) string {
	if idField == "" {
		idField = AutoIDField
	}
	v, _ := rec.field(idField)
	return string(v)
}

// skip reports whether rec is a later use of an id used before
// (DuplicatesFirst): the dispatch publishes only the first.
func (o *Options) skip(rec Record) bool {
	first, dup := o.dups[rec.ID]
	return dup && rec.Line != first
}

// missingField is the *LineError of a record that lacks a field the prompt
// of action a reads.
func missingField(file string, rec Record, a *workflow.Action, field string) *LineError {
	var keys []string
	rec.eachKey(func(k string) { keys = append(keys, k) })
	slices.Sort(keys)
	keys = slices.Compact(keys)
	return &LineError{File: file, Line: rec.Line, field: field, Reason: fmt.Sprintf(
		"action %q: prompt template uses field %q, which the record lacks (it has: %s)", a.Name, field, strings.Join(keys, ", "))}
}

// listErrors renders a list of refused lines under a head line.
func listErrors(errs []error, one, many, what string) string {
	var b strings.Builder
	n := len(errs)
	if n == 1 {
		fmt.Fprintf(&b, "1 %s, %s:", one, what)
	} else {
		fmt.Fprintf(&b, "%d %s, %s:", n, many, what)
	}
	for i, err := range errs {
		if i == MaxReportedErrors {
			fmt.Fprintf(&b, "\n  … and %d more", n-i)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(err.Error())
	}
	return b.String()
}
