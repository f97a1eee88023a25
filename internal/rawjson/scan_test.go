package rawjson

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var scanSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"b":[1,2,{"c":null}],"d":"x\"y\\z\/\u00e9\n"}`,
	`{"id":"r1","text":"` + strings.Repeat("x", 300) + `"}`,
	`{"k\u0065y":true,"":false,"e":-0.5e+10,"f":0,"g":1E3,"h":[],"i":{}}`,
	`{"a":"tab	in string"}`, `{"a":"unterminated}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":01}`,
	`{"a":-}`, `{"a":1.}`, `{"a":1e}`, `{"a":"\x"}`, `{"a":"\u12g4"}`, `{"a":tru}`, `{"a":nul}`,
	`{"a":[1,]}`, `{"a":[1 2]}`, `{"a":1} x`, `{"a":1}{}`, `[1,2]`, `"s"`, `12`, `null`, ``, `{`, `{"a":`,
	"{\"a\":\"\xff\xfe\"}", `{"a":"12345678\"90"}`, `{"abcdefgh":"ijklmnop\\qrstuvw"}`, "{\"a\":\"1234567\x01\"}",
	`{"a":[[[[[[[[[[1]]]]]]]]]]}`, `{"dup":1,"dup":2}`,
}

// Members accepts exactly what encoding/json accepts, and hands out the
// members encoding/json decodes, in order.
func FuzzMembers(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkMembers(t, b)
	})
}

func TestMembersSeeds(t *testing.T) {
	t.Parallel()
	for _, s := range scanSeeds {
		checkMembers(t, []byte(s))
	}
}

func checkMembers(t *testing.T, b []byte) {
	t.Helper()
	valid := json.Valid(b)
	require.Equal(t, valid, Valid(b), "Valid(%q)", b)
	var keys []string
	var values [][]byte
	err := Members(b, func(k string, v []byte) bool {
		keys = append(keys, strings.Clone(k))
		values = append(values, bytes.Clone(v))
		return true
	})
	trimmed := bytes.TrimLeft(b, " \t\r\n")
	switch {
	case !valid:
		require.Error(t, err, "%q", b)
		require.NotErrorIs(t, err, ErrNotObject)
	case len(trimmed) == 0 || trimmed[0] != '{':
		require.ErrorIs(t, err, ErrNotObject, "%q", b)
	default:
		require.NoError(t, err, "%q", b)
		// MembersOf, which trusts b, finds the same members.
		i := 0
		MembersOf(b, func(k string, v []byte) bool {
			require.Less(t, i, len(keys), "%q", b)
			require.Equal(t, keys[i], k, "%q", b)
			require.Equal(t, string(values[i]), string(v), "%q", b)
			i++
			return true
		})
		require.Equal(t, len(keys), i, "%q", b)
		// encoding/json's decoder, token by token: the same keys and values.
		dec := json.NewDecoder(bytes.NewReader(b))
		_, err := dec.Token() // {
		require.NoError(t, err)
		for i := 0; dec.More(); i++ {
			tok, err := dec.Token()
			require.NoError(t, err)
			var raw json.RawMessage
			require.NoError(t, dec.Decode(&raw))
			require.Less(t, i, len(keys), "%q", b)
			if utf8.ValidString(keys[i]) {
				require.Equal(t, tok.(string), keys[i], "%q", b)
			}
			require.Equal(t, string(raw), string(values[i]), "%q", b)
			if values[i][0] == '"' && utf8.Valid(values[i]) { // encoding/json replaces bad UTF-8; String keeps it, as gjson does
				var want string
				require.NoError(t, json.Unmarshal(values[i], &want))
				got, ok := String(values[i])
				require.True(t, ok)
				require.Equal(t, want, got)
			}
		}
	}
}

// fn returning false stops the walk, without an error.
func TestMembersStop(t *testing.T) {
	t.Parallel()
	var seen []string
	err := Members([]byte(`{"a":1,"b":2,"c":`), func(k string, _ []byte) bool {
		seen = append(seen, k)
		return k != "b"
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, seen)
	require.ErrorContains(t, Members([]byte(`{"a":1,"b":}`), func(string, []byte) bool { return true }), "invalid character '}'")
}

var benchLine = []byte(`{"id":"r12345","text":"` + strings.Repeat("x", 984) + `"}`)

func BenchmarkMembers(b *testing.B) {
	for b.Loop() {
		_ = Members(benchLine, func(string, []byte) bool { return true })
	}
}

func BenchmarkMembersOf(b *testing.B) {
	for b.Loop() {
		MembersOf(benchLine, func(string, []byte) bool { return true })
	}
}

// Nesting is bounded as encoding/json bounds it.
func TestValidDepth(t *testing.T) {
	t.Parallel()
	for _, n := range []int{10000, 10001} {
		b := []byte(strings.Repeat("[", n) + strings.Repeat("]", n))
		require.Equal(t, json.Valid(b), Valid(b), "depth %d", n)
	}
}

// Members and MembersOf allocate nothing for a record without escapes.
func TestMembersAllocateNothing(t *testing.T) {
	fn := func(string, []byte) bool { return true }
	require.Zero(t, testing.AllocsPerRun(100, func() { _ = Members(benchLine, fn) }))
	require.Zero(t, testing.AllocsPerRun(100, func() { MembersOf(benchLine, fn) }))
	require.Zero(t, testing.AllocsPerRun(100, func() { _, _ = String(benchLine[22 : len(benchLine)-1]) }))
}
