package broker

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// marshalResult writes exactly what json.Marshal writes, for a result with
// every field set (by reflection, so that a field added to the types is set
// too), for an empty one and for a typical one. A field added to Result or
// a type inside it fails the first check: add it to marshalResult and to
// resultFields (until then results are encoded by json.Marshal).
func TestResultJSONIsEncodingJSON(t *testing.T) {
	t.Parallel()
	require.Empty(t, resultFieldsMismatch(), "marshalResult does not know every field of the result types")
	require.True(t, resultFast)

	for _, variant := range []int{0, 1, 2} {
		var full Result
		fill(reflect.ValueOf(&full).Elem(), variant)
		checkResultJSON(t, &full)
	}
	checkResultJSON(t, &Result{})
	cost := 0.00012
	checkResultJSON(t, &Result{ID: "r1", Status: StatusOK, Output: "ok", Action: "act", Job: "zero", Provider: "sim", Model: "sim-1",
		Finished: time.Now().UTC(), LatencyMS: 0.012, Line: 7, Cost: &cost, TotalCost: &cost,
		Recovery: Recovery{Attempts: 1, Deliveries: 1}, Usage: Usage{InputTokens: 247, OutputTokens: 1},
		Actions: []Account{{Action: "act", Status: StatusOK, Attempts: 1, Calls: 1, Deliveries: 1, Usage: Usage{InputTokens: 247, OutputTokens: 1}}},
		Totals:  &Totals{Attempts: 1, Calls: 1, Usage: Usage{InputTokens: 247, OutputTokens: 1}}, RecordSum: "x0123456789abcdef"})
	for _, f := range []float64{1e-7, 1e21, 1e22, -2.5e-9, 123456.789, 5e-324} {
		checkResultJSON(t, &Result{LatencyMS: f, Cost: &f})
	}
	for _, s := range []string{"<a&b>", "q\"uote\\", "tab\t\x01", "é", "\u2028\u2029", "\xff"} {
		checkResultJSON(t, &Result{ID: s, Output: s, Reason: s, Recovery: Recovery{Classes: []string{s}}})
	}
	checkResultJSON(t, &Result{Output: map[string]any{"b": 1, "a": []any{"x", nil}}, Outputs: map[string]any{"z": json.RawMessage(`{"k": 1}`)}})
}

func checkResultJSON(t *testing.T, r *Result) {
	t.Helper()
	want, err := json.Marshal(r)
	require.NoError(t, err)
	got, err := marshalResult(r)
	require.NoError(t, err)
	require.Equal(t, string(want), string(got))
}

// fill sets every field of v, recursively, to a value that is not the
// zero value (variant picks among a few).
func fill(v reflect.Value, variant int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString([]string{"s", "<é>\"\\", "x\u2028"}[variant])
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		if v.Type() == reflect.TypeFor[time.Duration]() {
			v.SetInt(int64(1500*time.Millisecond) + int64(variant))
			return
		}
		v.SetInt(int64([]int{3, -7, 1 << 40}[variant]))
	case reflect.Float64:
		v.SetFloat([]float64{0.25, 1e-8, 3e21}[variant])
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), variant)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"raw":true}`))
			return
		}
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), variant)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		m.SetMapIndex(reflect.ValueOf("k1"), reflect.ValueOf([]any{"v", 2.5, true}[variant]))
		m.SetMapIndex(reflect.ValueOf("a0"), reflect.ValueOf(map[string]any{"n": 1}))
		v.Set(m)
	case reflect.Interface:
		v.Set(reflect.ValueOf([]any{"text", map[string]any{"title": "t", "n": 2}, []any{1, "two"}}[variant]))
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			loc := time.FixedZone("x", []int{0, 3600, -5400}[variant])
			v.Set(reflect.ValueOf(time.Date(2026, 11, 30, 12, 34, 56, []int{0, 123456789, 1000}[variant], loc)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), variant)
			}
		}
	default:
		panic("fill: unexpected kind " + v.Kind().String() + " in " + v.Type().String())
	}
}

func BenchmarkResultJSON(b *testing.B) {
	r := &Result{ID: "r12345", Status: StatusOK, Output: "ok", Action: "act", Job: "bench-zero-0", Provider: "sim", Model: "sim-1",
		Finished: time.Now().UTC(), LatencyMS: 0.012, Line: 12346, Recovery: Recovery{Attempts: 1, Deliveries: 1},
		Usage:   Usage{InputTokens: 247, OutputTokens: 1},
		Actions: []Account{{Action: "act", Status: StatusOK, Attempts: 1, Calls: 1, Deliveries: 1, Usage: Usage{InputTokens: 247, OutputTokens: 1}}},
		Totals:  &Totals{Attempts: 1, Calls: 1, Usage: Usage{InputTokens: 247, OutputTokens: 1}}, RecordSum: "x0123456789abcdef"}
	b.Run("marshalResult", func(b *testing.B) {
		for b.Loop() {
			_, _ = marshalResult(r)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
}

// A result's buffer is another result's only once ReleaseResult gave it
// back (its ack came): until then each result keeps its own bytes, and a
// result encoded after a release is whole. A result larger than the
// buffers is encoded in one of its own, which a release leaves alone.
func TestReleaseResultHandsItsBufferOn(t *testing.T) {
	t.Parallel()
	result := func(i int, out string) *Result {
		return &Result{ID: fmt.Sprintf("r%d", i), Status: StatusOK, Output: out, Action: "act", Job: "j",
			Finished: time.Unix(int64(i), 0).UTC(), Recovery: Recovery{Attempts: 1, Deliveries: 1}}
	}
	want := func(r *Result) string {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return string(b)
	}
	var held []*nats.Msg
	var wants []string
	for i := range 200 {
		r := result(i, strings.Repeat("a", i%7))
		m, err := resultMsg(r)
		require.NoError(t, err)
		if i%2 == 0 {
			ReleaseResult(m) // acked: its buffer goes to a later result
			require.Nil(t, m.Data)
			continue
		}
		held, wants = append(held, m), append(wants, want(r))
	}
	for i, m := range held {
		require.Equal(t, wants[i], string(m.Data), "a result not released keeps its bytes")
	}

	big := result(1, strings.Repeat("b", 2*resultBufSizes[len(resultBufSizes)-1]))
	m, err := resultMsg(big)
	require.NoError(t, err)
	ReleaseResult(m)
	require.Equal(t, want(big), string(m.Data), "a result larger than the buffers is not taken back")
	ReleaseResult(nil)
}

// Every byte at every offset of the eight-byte scan and of its tail is
// quoted as encoding/json quotes it.
func TestAppendStringIsEncodingJSON(t *testing.T) {
	t.Parallel()
	for c := range 256 {
		for n := 1; n <= 19; n++ {
			for at := range n {
				b := []byte(strings.Repeat("a", n))
				b[at] = byte(c)
				want, err := json.Marshal(string(b))
				require.NoError(t, err)
				got, err := appendString([]byte("x"), string(b))
				require.NoError(t, err)
				require.Equal(t, "x"+string(want), string(got), "byte %#x at %d of %d", c, at, n)
			}
		}
	}
	for _, s := range []string{"", "héllo wörld, 日本語", "tab\there", strings.Repeat("plain ascii ", 100), "\u2028\u2029", "\xff\xfe"} {
		want, _ := json.Marshal(s)
		got, err := appendString(nil, s)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}

// A result is encoded in a buffer its answer fits, and each size of buffer
// is taken back once released: a long answer does not outgrow a small one.
func TestResultBufferFitsItsAnswer(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, 100, 900, 1000, 3000, 4000, 12000, 13000} {
		r := &Result{ID: "r1", Status: StatusOK, Output: strings.Repeat("o", n), Action: "act", Job: "j",
			Finished: time.Unix(1, 0).UTC(), Recovery: Recovery{Attempts: 1, Deliveries: 1},
			Actions: []Account{{Action: "act", Status: StatusOK, Attempts: 1, Calls: 1}}, Totals: &Totals{Attempts: 1, Calls: 1}}
		m, err := resultMsg(r)
		require.NoError(t, err)
		want, _ := json.Marshal(r)
		require.Equal(t, string(want), string(m.Data))
		require.Contains(t, resultBufSizes[:], cap(m.Data), "answer of %d bytes: a buffer of %d, grown from a pooled one", n, cap(m.Data))
		ReleaseResult(m)
		require.Nil(t, m.Data)
	}
}
