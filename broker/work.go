package broker

import (
	"encoding/json"
	"strconv"

	"github.com/nats-io/nats.go"
)

// Envelope is the body of a work message (and of its dead letter): the
// record as it is for the action, with the outputs of earlier actions.
type Envelope struct {
	ID      string         `json:"id"`
	Record  map[string]any `json:"record"`
	Outputs map[string]any `json:"outputs,omitempty"`
	// Line of the input file, for diagnostics of bad input.
	Line int `json:"line,omitempty"`
	// RawRecord, when set, is written as "record" instead of Record: the
	// dispatcher passes the input line through without decoding it.
	RawRecord json.RawMessage `json:"-"`
}

// MarshalJSON writes RawRecord verbatim when it is set (the dispatcher's
// hot path: the record was validated when it was read, and is not decoded
// and encoded again).
func (e *Envelope) MarshalJSON() ([]byte, error) {
	type plain Envelope
	if e.RawRecord == nil || len(e.Outputs) > 0 {
		if e.RawRecord != nil {
			return json.Marshal(&struct {
				*plain
				Record json.RawMessage `json:"record"`
			}{plain: (*plain)(e), Record: e.RawRecord})
		}
		return json.Marshal((*plain)(e))
	}
	id, err := json.Marshal(e.ID)
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, len(e.RawRecord)+len(id)+40)
	b = append(b, `{"id":`...)
	b = append(b, id...)
	b = append(b, `,"record":`...)
	b = append(b, e.RawRecord...)
	if e.Line > 0 {
		b = append(b, `,"line":`...)
		b = strconv.AppendInt(b, int64(e.Line), 10)
	}
	return append(b, '}'), nil
}

// WorkMsgID is the dedupe id of a record's work message for an action and
// replay generation: dispatching or replaying twice never runs it twice.
func WorkMsgID(job, action, record string, replays int) string {
	return "work." + job + "." + action + "." + RecordToken(record) + "." + strconv.Itoa(replays)
}

// NewWorkMsg builds the work message of a record for an action.
func NewWorkMsg(job, action string, env *Envelope, replays int) (*nats.Msg, error) {
	data, err := env.MarshalJSON()
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(WorkSubject(job, action))
	m.Data = data
	m.Header.Set(HeaderMsgID, WorkMsgID(job, action, env.ID, replays))
	m.Header.Set(HeaderRecord, env.ID)
	if replays > 0 {
		m.Header.Set(HeaderReplays, strconv.Itoa(replays))
	}
	return m, nil
}
