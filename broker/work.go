package broker

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/nats-io/nats.go"

	"github.com/jetpool/jetpool/internal/rawjson"
)

// Envelope is the body of a work message (and of its dead letter): the
// record as it is for the action, with the outputs of earlier actions.
type Envelope struct {
	ID      string         `json:"id"`
	Record  map[string]any `json:"record"`
	Outputs map[string]any `json:"outputs,omitempty"`
	// Line of the input file, for diagnostics of bad input (and results in input order).
	Line int `json:"line,omitempty"`
	// Cost is what the record's earlier actions spent, in dollars, so that
	// each result can say the record's total.
	Cost float64 `json:"cost,omitempty"`
	// RawRecord, when set, is written as "record" instead of Record: the
	// dispatcher passes the input line through without decoding it.
	RawRecord json.RawMessage `json:"-"`
	// valid: RawRecord came out of an envelope UnmarshalJSON validated.
	valid bool
	// Accounts is what the earlier actions cost the record (Result.Actions),
	// carried to the next action so that its result can add them up.
	Accounts []Account `json:"accounts,omitempty"`
	// Sum is the hash of the input record (RecordSum), kept in its results.
	Sum string `json:"sum,omitempty"`
	// Files are the files the record's images and documents name, read by
	// the dispatcher (workers read no local files), by the path as the
	// template rendered it. They travel with the record to every action.
	Files map[string]File `json:"files,omitempty"`
}

// File is a file read for a record: its media type and its bytes, base64.
type File struct {
	MediaType string `json:"media_type"`
	Data      string `json:"data"`
}

// RecordSum is the hash of an input record as read: "x" and its 64-bit
// xxHash, in hex. A change of the record's text, white space included,
// changes it. (It tells an input fix's changed records from the unchanged;
// it need not resist an attacker, and SHA-256 was a tenth of a dispatch's
// CPU. Sums an earlier jetpool kept are 8 bytes of SHA-256: SameRecord
// reads both.)
func RecordSum(raw []byte) string {
	var b [17]byte
	b[0] = 'x'
	hex.Encode(b[1:], binary.BigEndian.AppendUint64(nil, xxhash.Sum64(raw)))
	return string(b[:])
}

// SameRecord reports whether sum, a RecordSum kept in a result, is the sum
// of raw: of either kind (the legacy kind is hex only, never "x…").
func SameRecord(sum string, raw []byte) bool {
	if strings.HasPrefix(sum, "x") {
		return sum == RecordSum(raw)
	}
	s := sha256.Sum256(raw)
	return sum == hex.EncodeToString(s[:8])
}

// MarshalJSON writes RawRecord verbatim when it is set (the dispatcher's
// hot path: the record was validated when it was read, and is not decoded
// and encoded again).
func (e *Envelope) MarshalJSON() ([]byte, error) {
	type plain Envelope
	if e.RawRecord == nil || len(e.Outputs) > 0 || e.Cost != 0 || len(e.Accounts) > 0 || len(e.Files) > 0 {
		if e.RawRecord != nil {
			return json.Marshal(&struct {
				*plain
				Record json.RawMessage `json:"record"`
			}{plain: (*plain)(e), Record: e.RawRecord})
		}
		return json.Marshal((*plain)(e))
	}
	b := make([]byte, 0, len(e.RawRecord)+len(e.ID)+64)
	b = append(b, `{"id":`...)
	b, err := appendString(b, e.ID)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"record":`...)
	b = append(b, e.RawRecord...)
	if e.Line > 0 {
		b = append(b, `,"line":`...)
		b = strconv.AppendInt(b, int64(e.Line), 10)
	}
	if e.Sum != "" {
		b = append(b, `,"sum":"`...)
		b = append(b, e.Sum...) // hex
		b = append(b, '"')
	}
	return append(b, '}'), nil
}

// appendString appends s as a JSON string, as encoding/json writes it:
// quoted as it is when it is printable ASCII that needs no escape (a record
// id nearly always, a model's English answer often), else by json.Marshal.
// It reads s eight bytes at a time: an answer is scanned for every result.
func appendString(b []byte, s string) ([]byte, error) {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if needsEscape(load64(s, i)) {
			return marshalString(b, s)
		}
	}
	for ; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return marshalString(b, s)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"'), nil
}

// load64 is s[i:i+8] as a little-endian word (one load: the compiler
// combines the bytes' loads).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func marshalString(b []byte, s string) ([]byte, error) {
	q, err := json.Marshal(s)
	return append(b, q...), err
}

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// hasByte reports whether a byte of x is c (the exact zero-byte test of x^c).
func hasByte(x uint64, c byte) bool {
	v := x ^ lsb*uint64(c)
	return (v-lsb)&^v&msb != 0
}

// needsEscape reports whether one of x's eight bytes is not printable ASCII
// or is one that encoding/json escapes: " \ < > &.
func needsEscape(x uint64) bool {
	return x&msb != 0 || // 0x80 and up
		(x-lsb*0x20)&^x&msb != 0 || // below 0x20 (of bytes below 0x80)
		hasByte(x, 0x7f) || hasByte(x, '"') || hasByte(x, '\\') ||
		hasByte(x, '<') || hasByte(x, '>') || hasByte(x, '&')
}

// UnmarshalJSON keeps the record undecoded (RawRecord); Fields decodes what
// a prompt needs. A worker never pays for decoding fields no template reads.
// It keeps a copy of b, as json.Unmarshaler must; see ParseEnvelope.
func (e *Envelope) UnmarshalJSON(b []byte) error {
	return e.parse(bytes.Clone(b))
}

// ParseEnvelope reads a work message's body. It is the worker's hot path:
// one validating pass over the envelope that hands out its top-level
// members (rawjson.Members), instead of encoding/json's validate, decode
// and skip over a record of any size; and the envelope shares data instead
// of copying it (its id, its record), so data must not be written to
// afterwards (a received message's data never is).
func ParseEnvelope(data []byte) (*Envelope, error) {
	var e Envelope
	if err := e.parse(data); err != nil {
		return nil, err
	}
	return &e, nil
}

func (e *Envelope) parse(b []byte) error {
	*e = Envelope{}
	var err error
	perr := rawjson.Members(b, func(k string, v []byte) bool {
		switch k {
		case "id":
			id, ok := rawjson.String(v)
			if !ok {
				err = fmt.Errorf("work envelope: id is a JSON %s, not a string", rawjson.KindOf(v))
				return false
			}
			e.ID = id
		case "record":
			switch v[0] {
			case 'n':
				e.RawRecord = nil
			case '{':
				e.RawRecord, e.valid = v, true
			default:
				err = fmt.Errorf("work envelope: record is a JSON %s, not an object", rawjson.KindOf(v))
				return false
			}
		case "outputs":
			e.Outputs = nil
			if v[0] != 'n' {
				if err = json.Unmarshal(v, &e.Outputs); err != nil {
					err = fmt.Errorf("work envelope: outputs: %w", err)
					return false
				}
			}
		case "line":
			e.Line = int(rawjson.Number(v))
		case "cost":
			e.Cost = rawjson.Number(v)
		case "sum":
			e.Sum, _ = rawjson.String(v)
		case "files":
			e.Files = nil
			if v[0] != 'n' {
				if err = json.Unmarshal(v, &e.Files); err != nil {
					err = fmt.Errorf("work envelope: files: %w", err)
					return false
				}
			}
		case "accounts":
			e.Accounts = nil
			if v[0] != 'n' {
				if err = json.Unmarshal(v, &e.Accounts); err != nil {
					err = fmt.Errorf("work envelope: accounts: %w", err)
					return false
				}
			}
		}
		return true
	})
	switch {
	case err != nil:
		return err
	case errors.Is(perr, rawjson.ErrNotObject):
		return fmt.Errorf("work envelope is a JSON %s, not an object", rawjson.KindOf(bytes.TrimSpace(b)))
	}
	return perr
}

// HasRecord reports whether the envelope carries a record.
func (e *Envelope) HasRecord() bool { return e.Record != nil || len(e.RawRecord) > 0 }

// Fields returns the record's fields: all of them when names is nil, else
// only those named (missing ones are left out). Numbers keep their text.
// Named fields are read in one pass over the record's top-level keys
// (their strings and numbers share the envelope's data); only object and
// array values are decoded with encoding/json.
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
	out := make(map[string]any, len(names))
	var err error
	field := func(k string, v []byte) bool {
		if !slices.Contains(names, k) {
			return true
		}
		switch v[0] {
		case '"':
			out[k], _ = rawjson.String(v)
		case 't':
			out[k] = true
		case 'f':
			out[k] = false
		case 'n':
			out[k] = nil
		case '{', '[':
			var x any
			dec := json.NewDecoder(bytes.NewReader(v))
			dec.UseNumber()
			if err = dec.Decode(&x); err != nil {
				err = fmt.Errorf("record field %s: %w", k, err)
				return false
			}
			out[k] = x
		default:
			out[k] = json.Number(rawjson.View(v))
		}
		return true
	}
	var perr error
	if e.valid {
		rawjson.MembersOf(e.RawRecord, field) // validated with the envelope
	} else {
		perr = rawjson.Members(e.RawRecord, field)
	}
	switch {
	case err != nil:
		return nil, err
	case errors.Is(perr, rawjson.ErrNotObject):
		return nil, fmt.Errorf("record: a JSON %s, not an object", rawjson.KindOf(bytes.TrimSpace(e.RawRecord)))
	case perr != nil:
		return nil, fmt.Errorf("record: %w", perr)
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
	return newWorkMsg(job, action, env, replays, "", true)
}

// NewDispatchMsg builds the work message the dispatcher publishes for a
// record of job: NewWorkMsg's, its Nats-Msg-Id ending with the job's
// Nonce when it has one, and the Nonce in HeaderNonce. While the job is
// leased (Job.Lease: published as it is validated, served by no one) the
// message has no Nats-Msg-Id: such a dispatch never publishes a record
// twice, one that takes the job over purges what was published first, and
// the server keeps no id of it for the dedupe window.
func NewDispatchMsg(job *Job, action string, env *Envelope, replays int) (*nats.Msg, error) {
	m, err := newWorkMsg(job.ID, action, env, replays, job.Nonce, job.Lease.IsZero())
	if err == nil && job.Nonce != "" {
		m.Header.Set(HeaderNonce, job.Nonce)
	}
	return m, err
}

func newWorkMsg(job, action string, env *Envelope, replays int, nonce string, withID bool) (*nats.Msg, error) {
	data, err := env.MarshalJSON()
	if err != nil {
		return nil, err
	}
	m := &nats.Msg{Subject: WorkSubject(job, action), Data: data, Header: make(nats.Header, 4)}
	if withID {
		id := WorkMsgID(job, action, env.ID, replays)
		if nonce != "" {
			id += "." + nonce
		}
		m.Header.Set(HeaderMsgID, id)
	}
	m.Header.Set(HeaderRecord, env.ID)
	if replays > 0 {
		m.Header.Set(HeaderReplays, strconv.Itoa(replays))
	}
	return m, nil
}
