package jetpool

import "errors"

// ErrInvalid is matched (errors.Is) by an error that refuses a request
// before anything was changed: a workflow or input that does not check, a
// key the process may not send, a budget that would stop the job at once.
// The CLI exits 2 on it. The error's own text says what and where.
var ErrInvalid = errors.New("jetpool: invalid request")

// invalidError is an error that is ErrInvalid too, with the text of its
// cause alone.
type invalidError struct{ err error }

func (e *invalidError) Error() string   { return e.err.Error() }
func (e *invalidError) Unwrap() []error { return []error{e.err, ErrInvalid} }

func invalid(err error) error {
	if err == nil || errors.Is(err, ErrInvalid) {
		return err
	}
	return &invalidError{err: err}
}
