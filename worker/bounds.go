package worker

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/jetpool/jetpool/retry"
	"github.com/jetpool/jetpool/workflow"
)

// A record that cannot be worked within jetpool's bounds is bad input: it
// is dead-lettered with reason bad_input and the reason, and the worker
// goes on with the next record.

// renderFailure is the outcome of a prompt that did not render. A record
// the prompt cannot be rendered over within the workflow package's bounds
// (workflow.ErrBadInput: ErrPromptTooLarge, ErrRenderTooLong) is bad input;
// any other failure is a programming error, as before.
func renderFailure(err error) *sessionEnd {
	var re *retry.Error
	if errors.Is(err, workflow.ErrBadInput) && errors.As(err, &re) {
		return &sessionEnd{err: re, reason: retry.ReasonBadInput}
	}
	return failed(retry.ReasonProgrammingError, retry.ClassProgramming, "TemplateError", err.Error())
}

// tooLargeError is a record whose next work message would pass the server's
// max_payload: the outputs of earlier actions travel with it, so it grows
// along the pipeline.
type tooLargeError struct {
	next      string
	size, max int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("the record with the outputs of its actions so far is a %d-byte work message for action %s, more than the NATS server's max_payload of %d bytes (raise max_payload: deploy/README.md, \"Big records\")",
		e.size, e.next, e.max)
}

func (e *tooLargeError) Is(target error) bool { return target == nats.ErrMaxPayload }

// msgSize is what the server counts of m against max_payload: its body and
// its headers as sent.
func msgSize(m *nats.Msg) int64 {
	n := len(m.Data)
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(": \r\n") + len(v)
			}
		}
	}
	return int64(n)
}

// fits refuses the next action's message m when the server would.
func fits(max int64, m *nats.Msg, next string) error {
	if max > 0 && msgSize(m) > max {
		return &tooLargeError{next: next, size: msgSize(m), max: max}
	}
	return nil
}
