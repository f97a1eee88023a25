package retry

import (
	"cmp"
	"fmt"
	"strings"
)

// DiagMaxLen is the longest one error may be in a diagnostic, in runes;
// longer ones are cut and end in "…".
const DiagMaxLen = 300

// Diagnose writes why a record finally failed and every attempt it made
// (docs/design.md §1), one line fit for a NATS header:
//
//	failed permanently: AuthError: invalid api key
//	failed after 6 attempts (2 deliveries): [1] RateLimitError: 429 …; [2] NetworkError; …
//
// A permanent failure after earlier attempts lists them too:
// "failed permanently: AuthError: … (after 3 attempts, 2 deliveries: [1] …)".
// Attempts are numbered by Attempt.N. deliveries ≤ 0 is taken from the attempts. Diagnose
// returns "" for a nil final error: there was no failure.
func Diagnose(final *Error, attempts []Attempt, deliveries int) string {
	if final == nil {
		return ""
	}
	if len(attempts) == 0 {
		attempts = []Attempt{{N: 1, Delivery: max(deliveries, 1), Class: classOf(final), Error: final.Error()}}
	}
	if deliveries <= 0 {
		for _, a := range attempts {
			deliveries = max(deliveries, a.Delivery)
		}
		deliveries = max(deliveries, 1)
	}
	counted := 0
	list := make([]string, 0, len(attempts))
	for _, a := range attempts {
		s := fmt.Sprintf("[%d] %s", a.N, clip(cmp.Or(a.Error, a.Class.TypeName())))
		if a.Batch {
			s += " (batch round)"
		}
		counted++
		list = append(list, s)
	}
	joined := strings.Join(list, "; ")
	if classOf(final).Permanent() {
		s := "failed permanently: " + clip(final.Error())
		if len(attempts) > 1 {
			s += fmt.Sprintf(" (after %s, %s: %s)", plural(counted, "attempt"), plural(deliveries, "delivery"), joined)
		}
		return s
	}
	return fmt.Sprintf("failed after %s (%s): %s", plural(counted, "attempt"), plural(deliveries, "delivery"), joined)
}

// DiagnoseMaxCalls is the diagnostic of a record that max_calls stopped:
// every call is listed, the last one's error among them.
func DiagnoseMaxCalls(maxCalls int, attempts []Attempt, deliveries int) string {
	return fmt.Sprintf("stopped at max_calls %d: %s", maxCalls, Diagnose(&Error{Class: ClassUnknown}, attempts, deliveries))
}

// clip redacts s, folds it onto one line and cuts it to DiagMaxLen runes.
func clip(s string) string {
	s = strings.Join(strings.Fields(Redact(s)), " ")
	if r := []rune(s); len(r) > DiagMaxLen {
		return string(r[:DiagMaxLen-1]) + "…"
	}
	return s
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	if strings.HasSuffix(noun, "y") {
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(noun, "y"))
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
