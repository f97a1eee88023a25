package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// The README's short tour and the reference it points to.
const (
	readmeFile    = "../../README.md"
	referenceFile = "../../docs/reference.md"
)

// readmeSection is the text of the docs/reference.md section whose heading
// starts with name.
func readmeSection(t *testing.T, name string) string {
	t.Helper()
	return docSection(t, referenceFile, name)
}

// docSection is the text of file's section whose heading starts with name.
func docSection(t *testing.T, file, name string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(data), "\n## "+name)
	require.True(t, ok, "%s has no section %q", file, name)
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var envName = regexp.MustCompile(`JETPOOL_[A-Z_]*[A-Z]`)

func uniqueSorted(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}

// `jetpool help` and the README name the same variables and exit codes,
// and every variable Config reads is documented.
func TestHelpMatchesReadme(t *testing.T) {
	env := readmeSection(t, "Environment")
	var table []string
	for _, line := range strings.Split(env, "\n") {
		if cell, ok := strings.CutPrefix(line, "| "); ok {
			cell, _, _ = strings.Cut(cell, " |")
			table = append(table, envName.FindAllString(cell, -1)...)
		}
	}
	table = uniqueSorted(table)
	require.NotEmpty(t, table)
	require.Equal(t, table, uniqueSorted(envName.FindAllString(usageEnv, -1)), "README Environment vs jetpool help")
	typ := reflect.TypeFor[broker.Config]()
	for i := range typ.NumField() {
		require.Contains(t, table, typ.Field(i).Tag.Get("envconfig"), "Config.%s is documented", typ.Field(i).Name)
	}

	codeRow := regexp.MustCompile(`(?m)^\| (\d+) \| `)
	var readme []string
	for _, m := range codeRow.FindAllStringSubmatch(readmeSection(t, "Commands"), -1) {
		readme = append(readme, m[1])
	}
	_, help, _ := strings.Cut(usageTail, "Exit codes:")
	var inHelp []string
	for _, m := range regexp.MustCompile(`(?m)^  (\d+) `).FindAllStringSubmatch(help, -1) {
		inHelp = append(inHelp, m[1])
	}
	require.Equal(t, []string{"0", "1", "2", "3", "4", "5", "130"}, readme)
	require.Equal(t, readme, inHelp, "README exit codes vs jetpool help")
}

// Every command in the README's Commands table exists, every command has
// a row, and every --flag a row names is one its command takes.
func TestReadmeCommandsTable(t *testing.T) {
	all := specs(t)
	// The first cell of each row; a \| inside it is not a cell's end.
	rows := regexp.MustCompile("(?m)^\\| (`jetpool (?:[^|\\\\]|\\\\.)*)\\|")
	code := regexp.MustCompile("`([^`]+)`")
	flagRE := regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	seen := map[string]bool{}
	tables := readmeSection(t, "Commands") + docSection(t, readmeFile, "Day 2")
	for _, row := range rows.FindAllStringSubmatch(tables, -1) {
		var cmd *cmdSpec
		for _, c := range code.FindAllStringSubmatch(row[1], -1) {
			words := strings.Fields(strings.TrimPrefix(c[1], "jetpool "))
			if cmd == nil || strings.HasPrefix(c[1], "jetpool ") {
				cmd = all[words[0]]
				require.NotNil(t, cmd, "README row %q: no command %q", row[1], words[0])
				seen[cmd.name] = true
			}
			spec := cmd
			for _, s := range cmd.subs {
				if slices.Contains(words, s.name) {
					spec = s
				}
			}
			for _, f := range flagRE.FindAllStringSubmatch(c[1], -1) {
				require.NotNil(t, spec.flags, "README: %s takes no flags, the row names --%s", spec.name, f[1])
				require.NotNil(t, spec.flags.Lookup(f[1]), "README: `%s`: %s has no flag --%s", c[1], spec.name, f[1])
			}
		}
	}
	for name := range all {
		require.True(t, seen[name], "README's Commands table has no row for %s", name)
	}
}
