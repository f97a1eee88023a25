package workflow

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/retry"
)

// allocated is how many bytes f allocates (the process's count, so a
// parallel test's allocations may add to it: the ceilings below are orders
// of magnitude above what the bounded code needs and below what the
// unbounded code took).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// The 13-line alias bomb took `jetpool validate` to 14.6 GB in
// 40 s; refused now, at the line where the expansion passes the bound.
const aliasBomb = `
actions:
  - name: a
    provider: sim
    prompt: "x"
    params:
      a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
`

func TestAliasBombRefused(t *testing.T) {
	var errs []string
	n := allocated(func() { errs = parseErrs(t, aliasBomb) })
	require.Equal(t, []string{fmt.Sprintf("workflow.yaml:11: its aliases expand the document past %d YAML nodes (write the values out, or alias less)", MaxExpandedNodes)}, errs)
	require.Less(t, n, uint64(64<<20), "bounded memory")
}

// Merge keys expand too: each mapping merges the one before it nine times.
func TestMergeKeyBombRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("x-0: &m0 {k0: 1, k1: 2, k2: 3, k3: 4, k4: 5, k5: 6, k6: 7, k7: 8}\n")
	for i := 1; i <= 8; i++ {
		fmt.Fprintf(&b, "x-%d: &m%d {<<: [*m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d, *m%d]}\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	b.WriteString("defaults: {<<: *m8}\nactions: [{name: a, provider: sim, prompt: x}]\n")
	var errs []string
	n := allocated(func() {
		_, err := Parse("workflow.yaml", []byte(b.String()))
		require.Error(t, err)
		errs = []string{err.Error()}
	})
	require.Contains(t, errs[0], "its aliases expand the document past")
	require.Less(t, n, uint64(64<<20), "bounded memory")
}

// An alias inside the value it names never ends a walk (a merge of itself
// recursed until the stack overflowed).
func TestAliasInsideItsValueRefused(t *testing.T) {
	t.Parallel()
	errs := parseErrs(t, `
defaults: &d
  <<: *d
actions: [{name: a, provider: sim, prompt: x}]
`)
	require.Equal(t, []string{"workflow.yaml:2: alias *d is inside the value it names"}, errs)
}

func TestSchemaFileAliasBombRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bomb := strings.Join(strings.Split(strings.TrimPrefix(aliasBomb, "\n"), "\n")[5:], "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "schema.yaml"), []byte(strings.ReplaceAll(bomb, "      ", "")), 0o600))
	_, err := Parse(filepath.Join(dir, "workflow.yaml"), []byte(`actions:
  - name: a
    provider: sim
    prompt: x
    expect: {schema: schema.yaml}
`))
	require.ErrorContains(t, err, "its aliases expand the document past")
}

// A legitimate workflow with anchors is far from the bound.
func TestAnchorsWithinTheBound(t *testing.T) {
	t.Parallel()
	w := mustParse(t, `
x-params: &p {temperature: 0.1, stop: ["a", "b", "c"]}
defaults: {provider: sim, params: *p}
actions:
  - {name: a, prompt: x, params: {<<: *p, top_p: 0.5}}
  - {name: b, prompt: y}
`)
	require.Equal(t, 0.5, w.Actions[0].Params["top_p"])
}

func items(n int) []any {
	s := make([]any, n)
	for i := range s {
		s[i] = fmt.Sprintf("item-%d", i)
	}
	return s
}

func badInput(t *testing.T, err error, want error) *retry.Error {
	t.Helper()
	require.ErrorIs(t, err, want)
	require.ErrorIs(t, err, ErrBadInput)
	var re *retry.Error
	require.True(t, errors.As(err, &re))
	require.Equal(t, retry.ClassInvalidRequest, re.Class)
	require.Equal(t, "BadInputError", re.TypeName)
	return re
}

// Three nested ranges over a 300-element field (27M items of
// output) took a worker to 3.4 GB; over 2,000 elements (8·10⁹ iterations)
// it never finished. Both stop at a bound, in bounded memory.
func TestRangeExplosionRefused(t *testing.T) {
	a := &Action{Name: "explode", Prompt: `{{range .items}}{{range $.items}}{{range $.items}}{{.}} {{end}}{{end}}{{end}}`}
	var err error
	n := allocated(func() { _, err = a.Render(map[string]any{"items": items(300)}) })
	re := badInput(t, err, ErrRenderTooLong)
	require.Equal(t, fmt.Sprintf("BadInputError: action explode: prompt: more than %d steps (nested {{range}}s over large fields?): prompt takes too long to render: bad input", MaxTemplateSteps), re.Error())
	require.Less(t, n, uint64(256<<20), "bounded memory, not 3.4 GB")

	// No output at all: only the step count stops it.
	quiet := &Action{Name: "spin", Prompt: `{{range .items}}{{range $.items}}{{range $.items}}{{end}}{{end}}{{end}}done`}
	n = allocated(func() { _, err = quiet.Render(map[string]any{"items": items(2000)}) })
	badInput(t, err, ErrRenderTooLong)
	require.Less(t, n, uint64(256<<20), "bounded memory")

	// One loop that prints a big field again and again passes the prompt's cap.
	big := &Action{Name: "big", Prompt: `{{range .items}}{{$.text}}{{end}}`}
	n = allocated(func() { _, err = big.Render(map[string]any{"items": items(100), "text": strings.Repeat("y", 1<<20)}) })
	re = badInput(t, err, ErrPromptTooLarge)
	require.Equal(t, fmt.Sprintf("BadInputError: action big: prompt: the rendered prompt passes %d bytes: prompt too large: bad input", MaxPromptBytes), re.Error())
	require.Less(t, n, uint64(8*MaxPromptBytes), "bounded memory: the prompt's cap, not 100 MB")

	// The same prompts over small fields render as before.
	out, err := a.Render(map[string]any{"items": items(2)})
	require.NoError(t, err)
	require.Equal(t, strings.Repeat("item-0 item-1 ", 4), out)
	out, err = quiet.Render(map[string]any{"items": items(20)})
	require.NoError(t, err)
	require.Equal(t, "done", out)
	out, err = (&Action{Name: "n", Prompt: `{{range 3}}{{.}}{{end}}{{range $k, $v := .m}}{{$k}}={{$v}};{{end}}`}).Render(map[string]any{"m": map[string]any{"a": 1, "b": 2}})
	require.NoError(t, err)
	require.Equal(t, "012a=1;b=2;", out)
}

// Text built by functions is counted before it is written: a string
// doubled in a loop, a json of the whole record in a loop, a huge printf
// width, a recursion of templates.
func TestBuiltTextAndRecursionRefused(t *testing.T) {
	rec := map[string]any{"items": items(100), "text": strings.Repeat("y", 1<<20)}
	for _, tc := range []struct {
		name, prompt string
		want         error
	}{
		{"doubling", `{{$x := "ab"}}{{range .items}}{{$x = printf "%s%s" $x $x}}{{end}}{{len $x}}`, ErrPromptTooLarge},
		{"json in a loop", `{{range .items}}{{$j := json $}}{{end}}`, ErrPromptTooLarge},
		{"print in a loop", `{{range .items}}{{$j := print $.text $.text}}{{end}}`, ErrPromptTooLarge},
		{"printf width", `{{printf "%0999999999d" 1}}`, ErrPromptTooLarge},
		{"printf precision", `{{printf "%.999999999f" 1.0}}`, ErrPromptTooLarge},
		{"printf indexed width", `{{printf "%[1]999999999d" 1}}`, ErrPromptTooLarge},
		{"binary recursion", `{{define "r"}}{{if .}}{{template "r" (slice . 1)}}{{template "r" (slice . 1)}}{{end}}{{end}}{{template "r" .items}}`, ErrRenderTooLong},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Action{Name: "x", Prompt: tc.prompt}
			var err error
			n := allocated(func() { _, err = a.Render(rec) })
			badInput(t, err, tc.want)
			require.Less(t, n, uint64(8*MaxBuiltBytes), "bounded memory")
		})
	}
	_, err := (&Action{Name: "x", Prompt: `{{printf "%*d" 5 1}}`}).Render(rec)
	require.ErrorContains(t, err, "a width or precision from an argument (*) is not allowed in a prompt")
}

// The bounded functions behave as text/template's own within the bounds.
func TestBoundedFunctionsAsBefore(t *testing.T) {
	t.Parallel()
	a := &Action{Name: "x", Prompt: `{{printf "%05d|%-4s|%.2f|%%|%[1]d" 7 "ab" 3.14159}} {{print "a" 1}} {{println "b"}}{{html "<b>"}} {{js "'"}} {{urlquery "a b"}} {{json .o}}`}
	out, err := a.Render(map[string]any{"o": map[string]any{"k": []any{1.0, "v"}}})
	require.NoError(t, err)
	require.Equal(t, "00007|ab  |3.14|%|7 a1 b\n&lt;b&gt; \\' a+b {\"k\":[1,\"v\"]}", out)

	// A parsed action (pooled renderers) renders the same, concurrently.
	w := mustParse(t, `
actions:
  - name: list
    provider: sim
    prompt: "{{range $i, $v := .items}}{{if $i}}, {{end}}{{$v}}{{end}}"
`)
	done := make(chan string)
	for range 8 {
		go func() {
			out, err := w.Actions[0].Render(map[string]any{"items": items(3)})
			if err != nil {
				out = err.Error()
			}
			done <- out
		}()
	}
	for range 8 {
		require.Equal(t, "item-0, item-1, item-2", <-done)
	}
}

func TestDecodeRefusesNewerFormat(t *testing.T) {
	t.Parallel()
	w := mustParse(t, "actions: [{name: a, provider: sim, prompt: x}]\n")
	enc, err := w.Encode()
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(enc, &m))
	require.EqualValues(t, FormatVersion, m["version"], "Encode writes its version")
	_, err = Decode(enc)
	require.NoError(t, err)

	m["version"] = FormatVersion + 1
	newer, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = Decode(newer)
	require.ErrorIs(t, err, ErrNewerFormat)
	require.EqualError(t, err, fmt.Sprintf("workflow.yaml (encoded): format version %d, but this jetpool reads up to version %d (upgrade it): workflow encoded by a newer jetpool", FormatVersion+1, FormatVersion))

	delete(m, "version")
	older, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = Decode(older)
	require.NoError(t, err, "no version: version 1, from before versions")
}

// What the bounds cost a render and what the worst cases take, measured
// (go test -run '^$' -bench Render -benchmem ./workflow/).
func BenchmarkRender(b *testing.B) {
	plain := &Action{Name: "plain", Prompt: "Answer: {{ .text }}"}
	ranged := &Action{Name: "ranged", Prompt: "{{range .items}}- {{.}}\n{{end}}"}
	spin := &Action{Name: "spin", Prompt: `{{range .items}}{{range $.items}}{{range $.items}}{{end}}{{end}}{{end}}`}
	explode := &Action{Name: "explode", Prompt: `{{range .items}}{{range $.items}}{{range $.items}}{{.}} {{end}}{{end}}{{end}}`}
	for _, a := range []*Action{plain, ranged, spin, explode} {
		cp, err := compilePrompt(a.Name, a.Prompt)
		if err != nil {
			b.Fatal(err)
		}
		a.prompt = cp
	}
	small := map[string]any{"text": "hello", "items": items(10)}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			_, _ = plain.Render(small)
		}
	})
	b.Run("range-10", func(b *testing.B) {
		for b.Loop() {
			_, _ = ranged.Render(small)
		}
	})
	big := map[string]any{"items": items(2000)}
	b.Run("spin-2000-cubed-refused", func(b *testing.B) {
		for b.Loop() {
			if _, err := spin.Render(big); !errors.Is(err, ErrRenderTooLong) {
				b.Fatal(err)
			}
		}
	})
	b.Run("explode-300-cubed-refused", func(b *testing.B) {
		for b.Loop() {
			if _, err := explode.Render(map[string]any{"items": items(300)}); !errors.Is(err, ErrBadInput) {
				b.Fatal(err)
			}
		}
	})
}
