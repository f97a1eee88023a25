package workflow

import (
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
)

// docs/workflow.md is the reference of every workflow field: each field the
// parser knows, each sim setting, preset, kind and template function is in
// it, and each of its examples is a workflow that parses.

const workflowDoc = "../docs/workflow.md"

func TestWorkflowDocExamplesParse(t *testing.T) {
	doc, err := os.ReadFile(workflowDoc)
	require.NoError(t, err)
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	require.GreaterOrEqual(t, len(blocks), 5, "an example per real provider")
	kinds := map[string]bool{}
	for i, b := range blocks {
		w, err := Parse(fmt.Sprintf("docs/workflow.md example %d", i+1), []byte(b[1]))
		require.NoError(t, err, "example %d:\n%s", i+1, b[1])
		for _, p := range w.Providers {
			kinds[p.Kind] = true
		}
	}
	for _, k := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini} {
		assert.True(t, kinds[k], "an example uses kind %s", k)
	}
}

// fieldListRE finds the field lists of parse.go: the known-fields argument
// of every p.fields call, specFields and the known lists, of parse.go,
// overflow.go and multimodal.go.
var fieldListRE = regexp.MustCompile(`(?s)(?:p\.fields\([^,]+,[^,]+,|specFields\s*=\s*\[\]string\{|known\s*:?=\s*(?:append\()?\[\]string\{)([^})]*)`)

// transportOnly are fields of the encoded workflow a job carries (Encode),
// never written by hand.
var transportOnly = map[string]bool{"file": true, "line": true, "schema_file": true, "schema_line": true}

func TestWorkflowDocHasEveryField(t *testing.T) {
	doc, err := os.ReadFile(workflowDoc)
	require.NoError(t, err)
	var src []byte
	for _, file := range []string{"parse.go", "overflow.go", "multimodal.go"} {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		src = append(src, b...)
	}
	documented := func(name string) bool {
		return strings.Contains(string(doc), "`"+name+"`") || strings.Contains(string(doc), "."+name+"`") ||
			strings.Contains(string(doc), "`"+name+".")
	}
	n := 0
	for _, m := range fieldListRE.FindAllStringSubmatch(string(src), -1) {
		for _, q := range regexp.MustCompile(`"([a-z_]+)"`).FindAllStringSubmatch(m[1], -1) {
			if transportOnly[q[1]] {
				continue
			}
			n++
			assert.True(t, documented(q[1]), "workflow field %q is missing from docs/workflow.md", q[1])
		}
	}
	assert.Greater(t, n, 40, "the scan of parse.go found its field lists")
	for _, typ := range []reflect.Type{reflect.TypeFor[provider.SimConfig](), reflect.TypeFor[provider.SimFaults]()} {
		for i := range typ.NumField() {
			if tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ","); tag != "" && tag != "-" {
				assert.True(t, documented(tag), "sim setting %q is missing from docs/workflow.md", tag)
			}
		}
	}
	for _, name := range provider.PresetNames() {
		assert.Contains(t, string(doc), "| `"+name+"` |", "preset %s", name)
	}
	for _, k := range provider.Kinds {
		assert.Contains(t, string(doc), "`"+k+"`", "kind %s", k)
	}
	for name := range TemplateFuncs {
		assert.Contains(t, string(doc), "| `"+name+"` |", "template function %s", name)
	}
	assert.Equal(t, 2*time.Minute, provider.TimeoutDefault, "docs/workflow.md says the default timeout is 2m")
}
