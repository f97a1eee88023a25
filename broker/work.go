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
}

// WorkMsgID is the dedupe id of a record's work message for an action and
// replay generation: dispatching or replaying twice never runs it twice.
func WorkMsgID(job, action, record string, replays int) string {
	return "work." + job + "." + action + "." + RecordToken(record) + "." + strconv.Itoa(replays)
}

// NewWorkMsg builds the work message of a record for an action.
func NewWorkMsg(job, action string, env *Envelope, replays int) (*nats.Msg, error) {
	data, err := json.Marshal(env)
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
