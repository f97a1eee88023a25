package broker

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// UnmarshalJSON keeps the record undecoded (RawRecord); Fields decodes what
// a prompt needs. A worker never pays for decoding fields no template reads.
func (e *Envelope) UnmarshalJSON(b []byte) error {
	type plain Envelope
	w := struct {
		*plain
		Record json.RawMessage `json:"record"`
	}{plain: (*plain)(e)}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	e.Record, e.RawRecord = nil, w.Record
	if string(w.Record) == "null" {
		e.RawRecord = nil
	}
	return nil
}

// HasRecord reports whether the envelope carries a record.
func (e *Envelope) HasRecord() bool { return e.Record != nil || len(e.RawRecord) > 0 }

// Fields returns the record's fields: all of them when names is nil, else
// only those named (missing ones are left out). Numbers keep their text.
func (e *Envelope) Fields(names []string) (map[string]any, error) {
	if e.RawRecord == nil {
		return e.Record, nil
	}
	if names == nil {
		var all map[string]any
		dec := json.NewDecoder(bytes.NewReader(e.RawRecord))
		dec.UseNumber()
		if err := dec.Decode(&all); err != nil {
			return nil, fmt.Errorf("record: %w", err)
		}
		return all, nil
	}
	var shallow map[string]json.RawMessage
	if err := json.Unmarshal(e.RawRecord, &shallow); err != nil {
		return nil, fmt.Errorf("record: %w", err)
	}
	out := make(map[string]any, len(names))
	for _, n := range names {
		raw, ok := shallow[n]
		if !ok {
			continue
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("record field %s: %w", n, err)
		}
		out[n] = v
	}
	return out, nil
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
