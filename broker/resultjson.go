package broker

import (
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// A result is encoded for every record, on the worker's hot path, and
// encoding/json's reflection over Result and its nested types was a tenth
// of a worker's CPU at zero latency. marshalResult writes the same bytes
// json.Marshal writes (TestResultJSONIsEncodingJSON fills every field and
// compares), by hand. It is used only while the types have exactly the
// fields it knows (resultFast, checked once): a field added to Result, or
// to a type inside it, turns it off — results are then encoded by
// json.Marshal, correct and slower — and fails that test, which says what
// to add here.

// Results are encoded in buffers of a few sizes, kept for the next results
// once a result's publish is over (ReleaseResult): a first action's result
// with a short answer is 600–700 bytes, one that echoes a long answer a few
// KiB. The size is chosen from the answer's length before encoding, so that
// a long answer is not encoded into a small buffer, grown and copied, with
// the small one lost to the pool. A result larger than the largest size is
// encoded in a buffer of its own, which is not kept.
var resultBufSizes = [...]int{bufSmall, bufMedium, bufLarge}

const (
	bufSmall  = 1 << 10
	bufMedium = 4 << 10
	bufLarge  = 16 << 10
)

// resultBufs hold arrays of each size, by pointer (a pooled slice would
// allocate its header on every Put).
var resultBufs = [len(resultBufSizes)]sync.Pool{
	{New: func() any { return new([bufSmall]byte) }},
	{New: func() any { return new([bufMedium]byte) }},
	{New: func() any { return new([bufLarge]byte) }},
}

// resultBuf is an empty buffer for a result of about n bytes.
func resultBuf(n int) []byte {
	switch {
	case n <= bufSmall:
		return resultBufs[0].Get().(*[bufSmall]byte)[:0]
	case n <= bufMedium:
		return resultBufs[1].Get().(*[bufMedium]byte)[:0]
	case n <= bufLarge:
		return resultBufs[2].Get().(*[bufLarge]byte)[:0]
	}
	return make([]byte, 0, n)
}

// resultSizeHint is a result's encoded size without its answer, its
// earlier outputs and its input, which resultSize adds.
const resultSizeHint = 768

func resultSize(r *Result) int {
	n := resultSizeHint + 160*len(r.Actions)
	if s, ok := r.Output.(string); ok {
		n += len(s) + len(s)/8 // room for some escapes
	} else if r.Output != nil {
		n += bufSmall
	}
	if len(r.Outputs) > 0 || len(r.Input) > 0 {
		n += bufMedium
	}
	return n
}

// ReleaseResult gives the buffer of the result message m (PublishResult)
// back for another result, once nothing will send m again: its store ack
// came. nats.go copies a message's bytes into its connection's buffer as
// it publishes; a pending async publish keeps the message only to send it
// again before its ack (no responders). m is not to be used after.
func ReleaseResult(m *nats.Msg) {
	if m == nil {
		return
	}
	switch b := m.Data[:cap(m.Data)]; cap(b) {
	case bufSmall:
		resultBufs[0].Put((*[bufSmall]byte)(b))
	case bufMedium:
		resultBufs[1].Put((*[bufMedium]byte)(b))
	case bufLarge:
		resultBufs[2].Put((*[bufLarge]byte)(b))
	default:
		return
	}
	m.Data = nil
}

// marshalResult encodes r as json.Marshal does, in a buffer of resultBufs.
func marshalResult(r *Result) ([]byte, error) {
	if !resultFast || r.Finished.Year() < 0 || r.Finished.Year() > 9999 {
		return json.Marshal(r)
	}
	w := jsonWriter{b: resultBuf(resultSize(r))}
	w.raw(`{"id":`)
	w.str(r.ID)
	w.raw(`,"status":`)
	w.str(r.Status)
	if r.Output != nil {
		w.raw(`,"output":`)
		w.any(r.Output)
	}
	if e := r.Error; e != nil {
		w.raw(`,"error":{"class":`)
		w.str(e.Class)
		w.raw(`,"retryable":`)
		w.bool(e.Retryable)
		w.raw(`,"message":`)
		w.str(e.Message)
		w.raw(`}`)
	}
	w.optStr(`,"reason":`, r.Reason)
	w.raw(`,"recovery":`)
	w.recovery(&r.Recovery)
	w.raw(`,"usage":`)
	w.usage(&r.Usage)
	w.raw(`,"action":`)
	w.str(r.Action)
	w.raw(`,"job":`)
	w.str(r.Job)
	if len(r.Outputs) > 0 {
		w.raw(`,"outputs":`)
		w.any(r.Outputs)
	}
	w.optStr(`,"provider":`, r.Provider)
	w.optStr(`,"model":`, r.Model)
	w.optStr(`,"deployment":`, r.Deployment)
	w.optInt(`,"replays":`, int64(r.Replays))
	w.raw(`,"finished_at":"`)
	w.b = r.Finished.AppendFormat(w.b, time.RFC3339Nano)
	w.raw(`"`)
	w.optStr(`,"finish_reason":`, r.FinishReason)
	w.optStr(`,"finish_reason_raw":`, r.FinishReasonRaw)
	if r.Cost != nil {
		w.raw(`,"cost":`)
		w.float(*r.Cost)
	}
	if r.TotalCost != nil {
		w.raw(`,"total_cost":`)
		w.float(*r.TotalCost)
	}
	if r.LatencyMS != 0 {
		w.raw(`,"latency_ms":`)
		w.float(r.LatencyMS)
	}
	w.optInt(`,"line":`, int64(r.Line))
	if len(r.Input) > 0 {
		w.raw(`,"input":`)
		w.any(r.Input)
	}
	w.optInt(`,"revision":`, int64(r.Revision))
	if len(r.Actions) > 0 {
		w.raw(`,"actions":[`)
		for i := range r.Actions {
			if i > 0 {
				w.raw(`,`)
			}
			w.account(&r.Actions[i])
		}
		w.raw(`]`)
	}
	if t := r.Totals; t != nil {
		w.raw(`,"totals":{"attempts":`)
		w.int(int64(t.Attempts))
		w.raw(`,"calls":`)
		w.int(int64(t.Calls))
		w.raw(`,"usage":`)
		w.usage(&t.Usage)
		w.raw(`,"latency_ms":`)
		w.int(t.LatencyMS)
		if t.Cost != nil {
			w.raw(`,"cost":`)
			w.float(*t.Cost)
		}
		w.raw(`}`)
	}
	w.optStr(`,"record_sum":`, r.RecordSum)
	w.raw(`}`)
	if w.err != nil {
		return json.Marshal(r) // and its error, as json.Marshal says it
	}
	return w.b, nil
}

type jsonWriter struct {
	b   []byte
	err error
}

func (w *jsonWriter) raw(s string) { w.b = append(w.b, s...) }

func (w *jsonWriter) str(s string) {
	var err error
	if w.b, err = appendString(w.b, s); err != nil && w.err == nil {
		w.err = err
	}
}

func (w *jsonWriter) optStr(key, s string) {
	if s != "" {
		w.raw(key)
		w.str(s)
	}
}

func (w *jsonWriter) int(n int64) { w.b = strconv.AppendInt(w.b, n, 10) }

func (w *jsonWriter) optInt(key string, n int64) {
	if n != 0 {
		w.raw(key)
		w.int(n)
	}
}

func (w *jsonWriter) bool(v bool) { w.b = strconv.AppendBool(w.b, v) }

// float writes f as encoding/json does (floatEncoder, 64 bits).
func (w *jsonWriter) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		if w.err == nil {
			w.err = &json.UnsupportedValueError{Str: strconv.FormatFloat(f, 'g', -1, 64)}
		}
		return
	}
	abs, format := math.Abs(f), byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	w.b = strconv.AppendFloat(w.b, f, format, -1, 64)
	if format == 'e' {
		// Clean up e-09 to e-9.
		if n := len(w.b); n >= 4 && w.b[n-4] == 'e' && w.b[n-3] == '-' && w.b[n-2] == '0' {
			w.b[n-2] = w.b[n-1]
			w.b = w.b[:n-1]
		}
	}
}

// any writes a value of any type: a string as str does, anything else by
// json.Marshal.
func (w *jsonWriter) any(v any) {
	if s, ok := v.(string); ok {
		w.str(s)
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		if w.err == nil {
			w.err = err
		}
		return
	}
	w.b = append(w.b, data...)
}

func (w *jsonWriter) usage(u *Usage) {
	w.raw(`{"input_tokens":`)
	w.int(int64(u.InputTokens))
	w.raw(`,"output_tokens":`)
	w.int(int64(u.OutputTokens))
	w.optInt(`,"cached_input_tokens":`, int64(u.CachedInputTokens))
	w.optInt(`,"cache_write_tokens":`, int64(u.CacheWriteTokens))
	w.optInt(`,"reasoning_tokens":`, int64(u.ReasoningTokens))
	w.raw(`}`)
}

func (w *jsonWriter) recovery(r *Recovery) {
	w.raw(`{"attempts":`)
	w.int(int64(r.Attempts))
	w.raw(`,"deliveries":`)
	w.int(int64(r.Deliveries))
	w.optInt(`,"repairs":`, int64(r.Repairs))
	if len(r.Failures) > 0 {
		w.raw(`,"failures":[`)
		for i := range r.Failures {
			f := &r.Failures[i]
			if i > 0 {
				w.raw(`,`)
			}
			w.raw(`{"n":`)
			w.int(int64(f.N))
			w.raw(`,"delivery":`)
			w.int(int64(f.Delivery))
			w.raw(`,"class":`)
			w.str(f.Class)
			w.raw(`,"error":`)
			w.str(f.Error)
			if f.Repair {
				w.raw(`,"repair":true`)
			}
			w.raw(`}`)
		}
		w.raw(`]`)
	}
	if len(r.Classes) > 0 {
		w.raw(`,"classes":[`)
		for i, c := range r.Classes {
			if i > 0 {
				w.raw(`,`)
			}
			w.str(c)
		}
		w.raw(`]`)
	}
	w.optInt(`,"waits":`, int64(r.Waits))
	w.optInt(`,"waited_ns":`, int64(r.Waited))
	w.optInt(`,"lost":`, int64(r.Lost))
	w.optInt(`,"hand_backs":`, int64(r.HandBacks))
	if len(r.Compacted) > 0 {
		w.raw(`,"compacted":[`)
		for i := range r.Compacted {
			c := &r.Compacted[i]
			if i > 0 {
				w.raw(`,`)
			}
			w.raw(`{`)
			n := len(w.b)
			w.optInt(`,"after":`, int64(c.After))
			w.optStr(`,"field":`, c.Field)
			w.optInt(`,"from":`, int64(c.From))
			w.optInt(`,"to":`, int64(c.To))
			w.optStr(`,"model":`, c.Model)
			w.raw(`,"note":`)
			w.str(c.Note)
			w.b = append(w.b[:n], w.b[n+1:]...) // the first member's comma
			w.raw(`}`)
		}
		w.raw(`]`)
	}
	if len(r.Routes) > 0 {
		w.raw(`,"routes":[`)
		for i := range r.Routes {
			rt := &r.Routes[i]
			if i > 0 {
				w.raw(`,`)
			}
			w.raw(`{`)
			n := len(w.b)
			w.optInt(`,"after":`, int64(rt.After))
			w.raw(`,"from":`)
			w.str(rt.From)
			w.raw(`,"to":`)
			w.str(rt.To)
			w.raw(`,"on":`)
			w.str(rt.On)
			w.b = append(w.b[:n], w.b[n+1:]...) // the first member's comma
			w.raw(`}`)
		}
		w.raw(`]`)
	}
	w.raw(`}`)
}

func (w *jsonWriter) account(a *Account) {
	w.raw(`{"action":`)
	w.str(a.Action)
	w.optInt(`,"revision":`, int64(a.Revision))
	w.raw(`,"status":`)
	w.str(a.Status)
	w.raw(`,"attempts":`)
	w.int(int64(a.Attempts))
	w.raw(`,"calls":`)
	w.int(int64(a.Calls))
	w.raw(`,"deliveries":`)
	w.int(int64(a.Deliveries))
	w.optInt(`,"repairs":`, int64(a.Repairs))
	w.raw(`,"usage":`)
	w.usage(&a.Usage)
	w.raw(`,"latency_ms":`)
	w.int(a.LatencyMS)
	if a.Cost != nil {
		w.raw(`,"cost":`)
		w.float(*a.Cost)
	}
	w.raw(`}`)
}

// resultFields are the fields marshalResult writes, type by type: each
// field's name, Go type and json tag.
var resultFields = map[reflect.Type][]string{
	reflect.TypeFor[Result](): {
		"ID string id", "Status string status", "Output interface {} output,omitempty", "Error *broker.ResultError error,omitempty",
		"Reason string reason,omitempty", "Recovery broker.Recovery recovery", "Usage broker.Usage usage", "Action string action",
		"Job string job", "Outputs map[string]interface {} outputs,omitempty", "Record json.RawMessage -",
		"Provider string provider,omitempty", "Model string model,omitempty", "Deployment string deployment,omitempty", "Replays int replays,omitempty",
		"Finished time.Time finished_at", "FinishReason string finish_reason,omitempty",
		"FinishReasonRaw string finish_reason_raw,omitempty", "Cost *float64 cost,omitempty", "TotalCost *float64 total_cost,omitempty",
		"LatencyMS float64 latency_ms,omitempty", "Line int line,omitempty", "Input map[string]interface {} input,omitempty",
		"Revision int revision,omitempty", "Actions []broker.Account actions,omitempty", "Totals *broker.Totals totals,omitempty",
		"RecordSum string record_sum,omitempty",
	},
	reflect.TypeFor[ResultError](): {"Class string class", "Retryable bool retryable", "Message string message"},
	reflect.TypeFor[Recovery](): {
		"Attempts int attempts", "Deliveries int deliveries", "Repairs int repairs,omitempty",
		"Failures []broker.Failure failures,omitempty", "Classes []string classes,omitempty", "Waits int waits,omitempty",
		"Waited time.Duration waited_ns,omitempty", "Lost int lost,omitempty", "HandBacks int hand_backs,omitempty",
		"Compacted []broker.Compaction compacted,omitempty", "Routes []broker.Route routes,omitempty",
	},
	reflect.TypeFor[Route](): {"After int after,omitempty", "From string from", "To string to", "On string on"},
	reflect.TypeFor[Compaction](): {
		"After int after,omitempty", "Field string field,omitempty", "From int from,omitempty", "To int to,omitempty",
		"Model string model,omitempty", "Note string note",
	},
	reflect.TypeFor[Failure](): {
		"N int n", "Delivery int delivery", "Class string class", "Error string error", "Repair bool repair,omitempty",
	},
	reflect.TypeFor[Usage](): {
		"InputTokens int input_tokens", "OutputTokens int output_tokens", "CachedInputTokens int cached_input_tokens,omitempty",
		"CacheWriteTokens int cache_write_tokens,omitempty", "ReasoningTokens int reasoning_tokens,omitempty",
	},
	reflect.TypeFor[Account](): {
		"Action string action", "Revision int revision,omitempty", "Status string status", "Attempts int attempts",
		"Calls int calls", "Deliveries int deliveries", "Repairs int repairs,omitempty", "Usage broker.Usage usage",
		"LatencyMS int64 latency_ms", "Cost *float64 cost,omitempty",
	},
	reflect.TypeFor[Totals](): {"Attempts int attempts", "Calls int calls", "Usage broker.Usage usage", "LatencyMS int64 latency_ms",
		"Cost *float64 cost,omitempty"},
}

// resultFast: the types have exactly the fields marshalResult writes.
var resultFast = resultFieldsMismatch() == ""

// resultFieldsMismatch names the first field the types have that
// resultFields does not (or the other way round), "" when they agree.
func resultFieldsMismatch() string {
	for t, want := range resultFields {
		if t.NumField() != len(want) {
			return t.Name() + " has " + strconv.Itoa(t.NumField()) + " fields, marshalResult writes " + strconv.Itoa(len(want))
		}
		for i := range t.NumField() {
			f := t.Field(i)
			if got := f.Name + " " + f.Type.String() + " " + f.Tag.Get("json"); got != want[i] {
				return t.Name() + "." + f.Name + ": " + got + ", marshalResult writes " + want[i]
			}
		}
	}
	return ""
}
