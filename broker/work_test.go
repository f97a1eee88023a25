package broker

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// A record passes through dispatch, pipeline hops and dead letters without
// being decoded; a worker decodes only the fields a prompt names.
func TestEnvelopeRoundTrip(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"id":"r1","text":"héllo \"q\"","n":12345678901234567890,"meta":{"a":[1,2]}}`)
	data, err := (&Envelope{ID: "r1", RawRecord: raw, Line: 7}).MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"r1","record":`+string(raw)+`,"line":7}`, string(data))

	var env Envelope
	require.NoError(t, json.Unmarshal(data, &env))
	require.True(t, env.HasRecord())
	require.Nil(t, env.Record, "nothing decoded yet")
	some, err := env.Fields([]string{"text", "n", "absent"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"text": `héllo "q"`, "n": json.Number("12345678901234567890")}, some)
	all, err := env.Fields(nil)
	require.NoError(t, err)
	require.Len(t, all, 4)

	// The next hop carries the record as it was, plus outputs.
	next := &Envelope{ID: env.ID, RawRecord: env.RawRecord, Outputs: map[string]any{"a1": "out"}}
	data2, err := next.MarshalJSON()
	require.NoError(t, err)
	var back map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(data2, &back))
	require.JSONEq(t, string(raw), string(back["record"]))
	require.JSONEq(t, `{"a1":"out"}`, string(back["outputs"]))

	var empty Envelope
	require.NoError(t, json.Unmarshal([]byte(`{"id":"x","record":null}`), &empty))
	require.False(t, empty.HasRecord())

	// Every kind of value a prompt can read; the last of duplicate keys wins
	// (as with encoding/json).
	var kinds Envelope
	require.NoError(t, kinds.UnmarshalJSON([]byte(`{"id":"k","line":3,"outputs":{"a":1},"record":{"s":"x","s":"y","b":true,"f":false,"z":null,"o":{"n":1.5},"l":[1,"2"]}}`)))
	require.Equal(t, "k", kinds.ID)
	require.Equal(t, 3, kinds.Line)
	require.Equal(t, map[string]any{"a": float64(1)}, kinds.Outputs)
	got, err := kinds.Fields([]string{"s", "b", "f", "z", "o", "l"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"s": "y", "b": true, "f": false, "z": nil,
		"o": map[string]any{"n": json.Number("1.5")}, "l": []any{json.Number("1"), "2"}}, got)
}

// A broken work message is an error that says what is wrong, never a
// half-read envelope.
func TestEnvelopeBroken(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"id":"x","record":{"a":1}`: "unexpected end of JSON input",
		`[1,2]`:                      "work envelope is a JSON array, not an object",
		`{"id":7,"record":{}}`:       "id is a JSON number, not a string",
		`{"id":"x","record":"text"}`: "record is a JSON string, not an object",
		`{"id":"x","outputs":[1]}`:   "work envelope: outputs: json: cannot unmarshal array",
	} {
		var env Envelope
		err := env.UnmarshalJSON([]byte(body))
		require.ErrorContains(t, err, want, body)
	}
	bad := Envelope{ID: "x", RawRecord: json.RawMessage(`{"a":`)}
	_, err := bad.Fields([]string{"a"})
	require.ErrorContains(t, err, "record: unexpected end of JSON input")
}

// UnmarshalJSON keeps its own copy (json.Unmarshaler's contract: a Decoder
// reuses its buffer); ParseEnvelope shares the message's bytes.
func TestEnvelopeCopyOrShare(t *testing.T) {
	t.Parallel()
	body := []byte(`{"id":"r1","record":{"text":"abc"},"line":2}`)
	var copied Envelope
	require.NoError(t, copied.UnmarshalJSON(body))
	shared, err := ParseEnvelope(body)
	require.NoError(t, err)
	require.Equal(t, copied.ID, shared.ID)
	require.Equal(t, copied.Line, shared.Line)
	require.Equal(t, string(copied.RawRecord), string(shared.RawRecord))
	body[len(`{"id":"r1","record":{"text":"`)] = 'X'
	require.JSONEq(t, `{"text":"abc"}`, string(copied.RawRecord))
	require.JSONEq(t, `{"text":"Xbc"}`, string(shared.RawRecord))
}

// The record's sum and the earlier actions' accounting travel in the
// envelope, on the dispatcher's fast path and on a pipeline hop alike.
func TestEnvelopeCarriesSumAndAccounts(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`{"id":"r1","text":"x"}`)
	sum := RecordSum(raw)
	require.Regexp(t, `^x[0-9a-f]{16}$`, sum)
	require.True(t, SameRecord(sum, raw))
	require.False(t, SameRecord(sum, json.RawMessage(`{"id":"r1","text":"y"}`)))
	require.True(t, SameRecord("ff312a65ee51d605", raw), "a sum an earlier jetpool kept: 8 bytes of SHA-256")
	require.False(t, SameRecord("ff312a65ee51d606", raw))
	data, err := (&Envelope{ID: "r1", RawRecord: raw, Line: 2, Sum: sum}).MarshalJSON()
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"r1","record":`+string(raw)+`,"line":2,"sum":"`+sum+`"}`, string(data))
	env, err := ParseEnvelope(data)
	require.NoError(t, err)
	require.Equal(t, sum, env.Sum)

	acc := []Account{{Action: "a1", Revision: 1, Status: StatusOK, Attempts: 2, Calls: 3, Deliveries: 1,
		Usage: Usage{InputTokens: 5, OutputTokens: 1}, LatencyMS: 40}}
	next := &Envelope{ID: "r1", RawRecord: env.RawRecord, Outputs: map[string]any{"a1": "out"}, Accounts: acc, Sum: sum}
	data, err = next.MarshalJSON()
	require.NoError(t, err)
	back, err := ParseEnvelope(data)
	require.NoError(t, err)
	require.Equal(t, acc, back.Accounts)
	require.Equal(t, sum, back.Sum)
	require.Equal(t, Totals{Attempts: 2, Calls: 3, Usage: Usage{InputTokens: 5, OutputTokens: 1}, LatencyMS: 40}, Sum(acc))
}

// BenchmarkRecordSum is the dispatcher's cost of a record's hash (1 KiB).
func BenchmarkRecordSum(b *testing.B) {
	raw := make([]byte, 1024)
	for i := range raw {
		raw[i] = byte('a' + i%26)
	}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		_ = RecordSum(raw)
	}
}
