package worker

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Limits of a diagnostic in a log line, in runes (logDiag).
const (
	LogOutputMaxLen = 120
	LogDiagMaxLen   = 600
)

// attemptMark is where an attempt starts in a diagnostic's list: "[3] ".
var attemptMark = regexp.MustCompile(`(?:^|: |; )\[(\d+)\] `)

// logDiag is a record's diagnostic shortened for a log line; the whole
// diagnostic stays in its result and dead letter. A record that failed its
// schema on every repair listed the same violation for each attempt and
// ended with up to OutputMaxLen runes of the model's output, a line of
// kilobytes per record. Here consecutive attempts that failed alike are
// listed once ("[1-4] SchemaViolationError: …"), the output is cut to
// LogOutputMaxLen runes and the whole to LogDiagMaxLen.
func logDiag(diag string) string {
	head, output, hasOutput := strings.Cut(diag, "; last output: ")
	s := foldAttempts(head)
	if hasOutput {
		s += "; last output: " + clipRunes(output, LogOutputMaxLen)
	}
	return clipRunes(s, LogDiagMaxLen)
}

// foldAttempts lists runs of consecutive attempts with the same error once.
// A list it cannot read (numbers out of order) is returned as it is.
func foldAttempts(head string) string {
	marks := attemptMark.FindAllStringSubmatchIndex(head, -1)
	if len(marks) < 2 {
		return head
	}
	// The permanent form wraps the list: "... (after 4 attempts, 1 delivery: [1] …; [4] …)".
	body, closing := head, ""
	if strings.Contains(head[:marks[0][0]], "(after ") && strings.HasSuffix(head, ")") {
		body, closing = head[:len(head)-1], ")"
	}
	type attempt struct {
		n    int
		text string
	}
	list := make([]attempt, len(marks))
	for i, m := range marks {
		n, _ := strconv.Atoi(body[m[2]:m[3]])
		end := len(body)
		if i+1 < len(marks) {
			end = marks[i+1][0] // the next mark starts with its "; "
		}
		list[i] = attempt{n, body[m[1]:end]}
		if i > 0 && n != list[i-1].n+1 {
			return head
		}
	}
	var sb strings.Builder
	sb.WriteString(body[:marks[0][2]-1]) // up to the first "["
	for i := 0; i < len(list); {
		j := i
		for j+1 < len(list) && list[j+1].text == list[i].text {
			j++
		}
		if i > 0 {
			sb.WriteString("; ")
		}
		if j > i {
			fmt.Fprintf(&sb, "[%d-%d] %s", list[i].n, list[j].n, list[i].text)
		} else {
			fmt.Fprintf(&sb, "[%d] %s", list[i].n, list[i].text)
		}
		i = j + 1
	}
	return sb.String() + closing
}

func clipRunes(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
