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
}
