package provider

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSSEReader: what the reader makes of streams at the edges of SSE.
func TestSSEReader(t *testing.T) {
	t.Parallel()
	type ev struct{ event, data string }
	for _, tc := range []struct {
		name   string
		stream string
		want   []ev
		notSSE string // the start of the body a *badStreamError quotes
	}{
		{name: "events, comments and an id", stream: ": hi\nid: 1\nevent: a\ndata: x\ndata: y\n\ndata: z\n\n",
			want: []ev{{"a", "x\ny"}, {"", "z"}}},
		{name: "a BOM and a blank line first", stream: "\ufeff\n\ndata: x\n\n", want: []ev{{"", "x"}}},
		{name: "a last event without its blank line", stream: "data: x", want: []ev{{"", "x"}}},
		{name: "llama.cpp's error line", stream: "data: x\n\nerror: {\"code\":500,\"message\":\"m\"}\n\n",
			want: []ev{{"", "x"}, {"error", `{"error":{"code":500,"message":"m"}}`}}},
		{name: "an error line of words", stream: "error: it broke\n\n", want: []ev{{"error", `{"error":"it broke"}`}}},
		{name: "an unknown field after the stream started is ignored", stream: "data: x\n\n<html>\ndata: y\n\n",
			want: []ev{{"", "x"}, {"", "y"}}},
		{name: "a JSON body", stream: "{\"error\":\n {\"message\":\"Error 429\"}}\n", notSSE: "{\"error\":\n {\"message\""},
		{name: "an HTML page", stream: "<html><body>502 Bad Gateway</body></html>", notSSE: "<html><body>502"},
		{name: "a BOM and words", stream: "\ufeffHello", notSSE: "Hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sr := newSSEReader(strings.NewReader(tc.stream))
			var got []ev
			for {
				e, err := sr.next()
				if err != nil {
					var bad *badStreamError
					if tc.notSSE != "" {
						require.True(t, errors.As(err, &bad), "want a *badStreamError, got %v", err)
						require.True(t, strings.HasPrefix(string(bad.data), tc.notSSE), "%q", bad.data)
						require.Contains(t, bad.Error(), "response is not an SSE stream: ")
					} else {
						require.ErrorIs(t, err, io.EOF)
					}
					break
				}
				got = append(got, ev{e.event, string(e.data)})
			}
			require.Equal(t, tc.want, got)
		})
	}
}

// FuzzSSEReader: any bytes end in events and then an error, never a panic
// or a loop, and a bad stream's message stays short.
func FuzzSSEReader(f *testing.F) {
	for _, s := range []string{"data: x\n\n", "\ufeff", "\ufeff\n", "error: \n\n", "error:{", ":\n", "data", "\r\n\r\n",
		"<html>", "{\"error\":{}}", "event: error\ndata: Error 429\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sr := newSSEReader(strings.NewReader(string(b)))
		for i := 0; i <= len(b)+1; i++ {
			_, err := sr.next()
			if err == nil {
				continue
			}
			var bad *badStreamError
			if errors.As(err, &bad) {
				require.LessOrEqual(t, len(bad.Error()), 2*MaxMessageLen)
			} else {
				require.ErrorIs(t, err, io.EOF)
			}
			return
		}
		t.Fatalf("more events than bytes in %q", b)
	})
}
