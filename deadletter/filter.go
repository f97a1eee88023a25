package deadletter

import (
	"fmt"
	"slices"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// Check returns an error naming the field of f that no dead letter can
// match: a reason or class jetpool does not use, or a job or action name
// that cannot be one (a name is a subject token: "*" or ">" in it would
// widen the filter instead). `jetpool dlq`, `retry` and the dashboard check their filters here.
func (f Filter) Check() error {
	if f.Reason != "" && !ValidReason(f.Reason) {
		return fmt.Errorf("reason %q: want one of %v", f.Reason, retry.Reasons)
	}
	if f.Class != "" && !slices.Contains(retry.Classes, retry.Class(f.Class)) {
		return fmt.Errorf("class %q: want one of %v", f.Class, retry.Classes)
	}
	if f.Job != "" && !broker.ValidName(f.Job) {
		return fmt.Errorf("job %q is not a valid job id", f.Job)
	}
	if f.Action != "" && !broker.ValidName(f.Action) {
		return fmt.Errorf("action %q is not a valid action name", f.Action)
	}
	return nil
}
