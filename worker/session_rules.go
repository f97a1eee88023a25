package worker

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/jetpool/jetpool/expect"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// jsonMode says whether to ask for the provider's JSON mode. With a schema,
// always (structured output). Without one, only when the action sets json:
// or the conversation mentions JSON: OpenAI's json_object mode refuses, with
// a 400, messages that never say "json", which would dead-letter every
// record as invalid_request.
func jsonMode(a *workflow.Action, msgs []provider.Message) bool {
	if a.JSON || a.Expect.Schema != nil {
		return true
	}
	if strings.Contains(strings.ToLower(a.System), "json") {
		return true
	}
	for _, m := range msgs {
		if strings.Contains(strings.ToLower(m.Content), "json") {
			return true
		}
	}
	return false
}

// stoppedByCap reports whether a round that failed with o, once max_calls
// is spent, would have gone on under pol alone: the session would have
// retried (its budget was shrunk to the calls left), or the exec layer
// redelivered.
func stoppedByCap(pol retry.Policy, o retry.Outcome, delivery int) bool {
	if o.Err == nil || o.Err.Class.Permanent() {
		return false
	}
	if retry.Retryable(o.Err) && o.Calls < pol.Attempts() {
		return true
	}
	return pol.Decide(o, delivery).Verdict == retry.VerdictRedeliver
}

// maxCallsDiag explains a record stopped by max_calls:
// "stopped at max_calls 4: failed after 4 attempts (1 delivery): [1] …",
// and the last output when a repair was cut short.
func maxCallsDiag(maxCalls, delivery int, lastOutput string) func([]retry.Attempt) string {
	return func(all []retry.Attempt) string {
		s := retry.DiagnoseMaxCalls(maxCalls, all, delivery)
		if lastOutput != "" {
			s += "; last output: " + clipOutput(lastOutput)
		}
		return s
	}
}

// repairsOf counts the repair calls in attempts: every schema violation
// was followed by a repair call, except a last one that ended the record
// (failed true).
func repairsOf(attempts []retry.Attempt, failed bool) int {
	// A batch answer's violation was not repaired in its round.
	repaired := func(a retry.Attempt) bool { return a.Class == retry.ClassSchemaViolation && !a.Batch }
	n := 0
	for _, a := range attempts {
		if repaired(a) {
			n++
		}
	}
	if failed && n > 0 && repaired(attempts[len(attempts)-1]) {
		n--
	}
	return n
}

// asViolation is a failed expectation check as a Violation (an error the
// checker did not describe counts as invalid JSON).
func asViolation(err error, output string) *expect.Violation {
	var viol *expect.Violation
	if !errors.As(err, &viol) {
		viol = &expect.Violation{Cause: expect.CauseInvalidJSON, Detail: err.Error(), Output: output}
	}
	return viol
}

// schemaViolation is the session error of an output that failed action a's
// expectation.
func schemaViolation(a *workflow.Action, viol *expect.Violation, model string) *retry.Error {
	return &retry.Error{Class: retry.ClassSchemaViolation, TypeName: "SchemaViolationError", Message: viol.Error(),
		Provider: a.Provider, Model: model}
}

// exhaustedPolicy is the on_exhausted that decides the job's fate when a
// record ends with reason: the repair's for a schema violation (or a
// max_calls cap that stopped a repair), the retry's otherwise.
func exhaustedPolicy(a *workflow.Action, reason retry.Reason, final *retry.Error) retry.OnExhausted {
	repair := reason == retry.ReasonSchemaViolation ||
		(reason == retry.ReasonMaxCalls && final != nil && final.Class == retry.ClassSchemaViolation)
	if repair && a.Expect != nil {
		return a.Expect.RepairOnExhausted
	}
	return a.Retry.OnExhausted
}

// clipOutput folds a model's output onto one line (it goes into a NATS
// header), redacts anything shaped like a key, and cuts it to OutputMaxLen.
func clipOutput(s string) string {
	s = strings.Join(strings.Fields(retry.Redact(s)), " ")
	if r := []rune(s); len(r) > OutputMaxLen {
		return string(r[:OutputMaxLen-1]) + "…"
	}
	if s == "" {
		return `""`
	}
	return s
}

// checkers caches compiled expectations by schema: compiling on every
// delivery would cost more than the check. Bounded, for long-running
// workers that see many jobs.
var checkers = struct {
	sync.Mutex
	m map[string]*expect.Checker
}{m: map[string]*expect.Checker{}}

const checkersMax = 256

// checkerFor returns the checker of an expect: block, nil when the output
// is not checked (no block, or format text).
func checkerFor(e *workflow.Expect) (*expect.Checker, error) {
	if e == nil || e.Format != workflow.FormatJSON {
		return nil, nil
	}
	key := ""
	if e.Schema != nil {
		b, err := json.Marshal(e.Schema) // map keys sorted: a canonical key
		if err != nil {
			return nil, err
		}
		key = string(b)
	}
	checkers.Lock()
	defer checkers.Unlock()
	if c, ok := checkers.m[key]; ok {
		return c, nil
	}
	c, err := expect.New(e.Schema)
	if err != nil {
		return nil, err
	}
	if len(checkers.m) >= checkersMax {
		clear(checkers.m)
	}
	checkers.m[key] = c
	return c, nil
}
