package dispatcher_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A file that starts with a UTF-8 byte order mark (as Windows editors
// write them) reads as it would without one, JSONL as CSV; in JSONL a mark
// anywhere else is malformed.
func TestReadSkipsByteOrderMark(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, content string }{
		{"in.jsonl", "\ufeff{\"id\":\"a\",\"text\":\"x\"}\n\ufeff{\"id\":\"b\"}\n"},
		{"in.csv", "\ufeffid,text\na,x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := dispatcher.Open(testenv.WriteFile(t, tc.name, tc.content), "", "id")
			require.NoError(t, err)
			defer r.Close()
			rec, err := r.Next()
			require.NoError(t, err)
			require.Equal(t, "a", rec.ID)
			require.JSONEq(t, `{"id":"a","text":"x"}`, string(rec.Raw))
			if tc.name == "in.jsonl" {
				_, err = r.Next()
				require.ErrorContains(t, err, "in.jsonl:2: malformed JSON")
			}
		})
	}
}
