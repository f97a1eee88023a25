package dispatcher_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// png is a 1×1 PNG; pdf the head of a PDF.
var (
	png, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")
	pdf    = []byte("%PDF-1.4\n%\xc7\xec\x8f\xa2\n1 0 obj\n<<>>\nendobj\ntrailer\n<<>>\n%%EOF\n")
)

const partsWorkflow = `
providers:
  sim: {kind: sim}
actions:
  - name: look
    provider: sim
    prompt: "Look at {{ .id }}"
    images: ["{{ .photo }}"]
    documents: ["{{ .doc }}"]
  - name: again
    provider: sim
    prompt: "{{ .look }}"
    images: ["{{ .look }}"]
`

// inputDir writes files and an input beside them, and returns the input's path.
func inputDir(t *testing.T, input string, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for name, b := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, 0o600))
	}
	p := filepath.Join(dir, "in.jsonl")
	require.NoError(t, os.WriteFile(p, []byte(input), 0o600))
	return p
}

// The files a record's images and documents name are read by the
// dispatcher, relative to the input, and travel in its work message; URLs
// and data: URLs are left as they are, and an entry that reads an earlier
// action's output is the worker's to render.
func TestFilesCarriedInTheRecord(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, partsWorkflow)
	in := inputDir(t, `{"id":"a","photo":"img/a.png","doc":"a.pdf"}
{"id":"b","photo":"https://example.com/b.png","doc":""}
{"id":"c","photo":"data:image/png;base64,`+base64.StdEncoding.EncodeToString(png)+`","doc":"a.pdf"}
`, map[string][]byte{"img/a.png": png, "a.pdf": pdf})
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	require.EqualValues(t, 3, res.Published)

	envs := map[string]*broker.Envelope{}
	for _, env := range workEnvelopes(t, b, 3) {
		envs[env.ID] = env
	}
	require.Len(t, envs, 3)
	require.Equal(t, map[string]broker.File{
		"img/a.png": {MediaType: "image/png", Data: base64.StdEncoding.EncodeToString(png)},
		"a.pdf":     {MediaType: "application/pdf", Data: base64.StdEncoding.EncodeToString(pdf)},
	}, envs["a"].Files)
	require.Empty(t, envs["b"].Files, "a URL is sent as it is")
	require.Equal(t, []string{"a.pdf"}, keys(envs["c"].Files), "a data: URL is in the record already")
}

// workEnvelopes reads the first n messages of the work stream.
func workEnvelopes(t *testing.T, b *broker.Broker, n int) []*broker.Envelope {
	t.Helper()
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, broker.StreamWork)
	require.NoError(t, err)
	var out []*broker.Envelope
	for seq := uint64(1); seq <= uint64(n); seq++ {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err)
		env, err := broker.ParseEnvelope(m.Data)
		require.NoError(t, err)
		out = append(out, env)
	}
	return out
}

func keys(m map[string]broker.File) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A file that is missing, of the wrong type, or a URL of another scheme
// refuses its line with the field; --skip-bad dead-letters it.
func TestBadFilesRefused(t *testing.T) {
	t.Parallel()
	wf := testenv.Workflow(t, partsWorkflow)
	in := inputDir(t, `{"id":"a","photo":"missing.png","doc":""}
{"id":"b","photo":"a.pdf","doc":""}
{"id":"c","photo":"s3://bucket/c.png","doc":""}
{"id":"d","photo":"data:text/plain;base64,aGk=","doc":""}
{"id":"e","photo":"img.png","doc":"img.png"}
{"id":"f","photo":"img.png","doc":""}
`, map[string][]byte{"a.pdf": pdf, "img.png": png})
	dir := filepath.Dir(in)
	_, _, bad, err := dispatcher.Check(wf, dispatcher.Options{Input: in, IDField: "id"})
	require.NoError(t, err)
	var got []string
	for _, e := range bad {
		got = append(got, strings.ReplaceAll(e.Error(), dir, "DIR"))
	}
	require.Equal(t, []string{
		"DIR/in.jsonl:1: actions[0].images[0]: DIR/missing.png: no such file (a path is relative to the input file's directory)",
		"DIR/in.jsonl:2: actions[0].images[0]: a.pdf is application/pdf, want image/png, image/jpeg, image/gif, image/webp",
		"DIR/in.jsonl:3: actions[0].images[0]: a s3:// URL: want an http(s) URL, a data: URL or a file path",
		"DIR/in.jsonl:4: actions[0].images[0]: a data: URL of text/plain, want image/png, image/jpeg, image/gif, image/webp",
		"DIR/in.jsonl:5: actions[0].documents[0]: img.png is image/png, want application/pdf",
	}, got)
}

// The files count against max_payload with the record: one too large for
// the server is refused before anything is published.
func TestFilesCountAgainstMaxPayload(t *testing.T) {
	t.Parallel()
	wf := testenv.Workflow(t, partsWorkflow)
	big := append(append([]byte{}, png...), make([]byte, 9000)...) // still a PNG by its head
	in := inputDir(t, `{"id":"a","photo":"big.png","doc":""}
{"id":"b","photo":"small.png","doc":""}
`, map[string][]byte{"big.png": big, "small.png": png})
	_, n, bad, err := dispatcher.Check(wf, dispatcher.Options{Input: in, IDField: "id", MaxPayload: 8192})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Len(t, bad, 1)
	require.Contains(t, bad[0].Error(), "in.jsonl:1: the record is 37 bytes with 12189 bytes of files (base64) and its work message up to")
	require.Contains(t, bad[0].Error(), "more than the NATS server's max_payload of 8192 bytes")
}

// A file is read when the job is dispatched: the record's work message is
// what a worker gets, wherever it runs.
func TestFilesReadAtDispatch(t *testing.T) {
	t.Parallel()
	b := testenv.Broker(t)
	wf := testenv.Workflow(t, partsWorkflow)
	in := inputDir(t, `{"id":"a","photo":"a.png","doc":""}`+"\n", map[string][]byte{"a.png": png})
	res := testenv.Dispatch(t, b, wf, in, dispatcher.Options{})
	require.NoError(t, os.Remove(filepath.Join(filepath.Dir(in), "a.png")))
	require.EqualValues(t, 1, res.Published)
	require.Contains(t, workEnvelopes(t, b, 1)[0].Files, "a.png")
}
