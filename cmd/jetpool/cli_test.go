package main

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// needTool finds an installed program a test needs: missing, the test
// fails under CI (which installs it) and skips elsewhere.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s is not installed (.ci/run installs it)", name)
	}
	t.Skipf("%s is not installed", name)
	return ""
}

// specs is every command's spec, as completion reads it.
func specs(t *testing.T) map[string]*cmdSpec {
	t.Helper()
	e := &env{commands: commands}
	out := map[string]*cmdSpec{}
	for _, c := range commands {
		out[c.name] = describe(context.Background(), e, c)
	}
	return out
}

// `-h`, `--help` and `help CMD` print the help on stdout and exit 0, so
// `jetpool run -h | less` shows it; whatever the environment holds.
func TestHelpOnStdout(t *testing.T) {
	setEnv(t)
	t.Setenv("JETPOOL_CONCURRENCY", "0") // a configuration error: help still works
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		code, stdout, stderr := jetpool(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, stderr)
		require.Empty(t, stderr, args)
		for _, c := range commands {
			require.Regexp(t, `(?m)^  `+c.name+` +\S`, stdout, "%v lists %s", args, c.name)
		}
		require.Contains(t, stdout, "Exit codes:")
	}
	for name, spec := range specs(t) {
		want := "Usage: jetpool " + name
		if len(spec.subs) > 0 {
			want = "Usage: jetpool " + name + " " + spec.subs[0].name
		}
		code, stdout, stderr := jetpool(t, name, "-h")
		require.Equal(t, 0, code, "%s -h: %s", name, stderr)
		require.Empty(t, stderr, "%s -h", name)
		require.True(t, strings.HasPrefix(stdout, want), "%s -h:\n%s", name, stdout)
		code, help, _ := jetpool(t, "help", name)
		require.Equal(t, 0, code, "help %s", name)
		require.Equal(t, stdout, help, "help %s is %s -h", name, name)
		if spec.flags != nil {
			spec.flags.VisitAll(func(f *flag.Flag) {
				require.Contains(t, stdout, "  --"+f.Name, "%s -h names --%s", name, f.Name)
			})
		}
		for _, sub := range spec.subs {
			code, stdout, stderr := jetpool(t, "help", name, sub.name)
			require.Equal(t, 0, code, "help %s %s: %s", name, sub.name, stderr)
			require.True(t, strings.HasPrefix(stdout, "Usage: jetpool "+name+" "+sub.name), stdout)
			_, again, _ := jetpool(t, name, sub.name, "--help")
			require.Equal(t, stdout, again)
		}
	}
}

// A usage error: a short word on stderr, nothing on stdout, exit 2.
func TestUsageErrors(t *testing.T) {
	setEnv(t)
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{nil, "Usage: jetpool COMMAND"},
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"run", "--bogus"}, "jetpool run: flag provided but not defined: -bogus\nRun 'jetpool help run' for its usage."},
		{[]string{"run", "--concurrency", "many"}, `invalid value "many" for flag -concurrency`},
		{[]string{"validate"}, "Usage: jetpool validate WORKFLOW [--input FILE]\njetpool validate: want exactly one WORKFLOW argument"},
		{[]string{"dlq"}, "jetpool dlq: want a subcommand: list, show, purge"},
		{[]string{"dlq", "frob"}, `jetpool dlq: unknown subcommand "frob"`},
		{[]string{"dlq", "show", "x"}, `SEQ "x" is not a number`},
		{[]string{"help", "frob"}, `unknown command "frob"`},
		{[]string{"completion"}, "want one shell: bash, zsh, fish"},
		{[]string{"completion", "tcsh"}, `unknown shell "tcsh"`},
		{[]string{"version", "extra"}, "unexpected arguments"},
	} {
		code, stdout, stderr := jetpool(t, tc.args...)
		require.Equal(t, 2, code, "%v: %s", tc.args, stderr)
		require.Empty(t, stdout, "%v", tc.args)
		require.Contains(t, stderr, tc.say, "%v", tc.args)
		require.Less(t, strings.Count(stderr, "\n"), 25, "%v: short", tc.args)
	}
	t.Setenv("JETPOOL_LOG_FORMAT", "xml")
	code, _, stderr := jetpool(t, "status")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, `jetpool: configuration: JETPOOL_LOG_FORMAT: "xml" is not json or console`)
}

// A NATS server that cannot be reached, or whose JetStream is off or
// held, exits 3: not 1, which says the job failed.
func TestExitCodeUnavailable(t *testing.T) {
	dir := setEnv(t)
	t.Setenv("JETPOOL_NATS_URL", "nats://127.0.0.1:1")
	code, _, stderr := jetpool(t, "status")
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stderr, "jetpool status: connect to NATS at nats://127.0.0.1:1: nats: no servers available for connection")

	noJS, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	noJS.Start()
	t.Cleanup(func() { noJS.Shutdown(); noJS.WaitForShutdown() })
	require.True(t, noJS.ReadyForConnections(10*time.Second))
	t.Setenv("JETPOOL_NATS_URL", noJS.ClientURL())
	code, _, stderr = jetpool(t, "dlq", "list")
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stderr, "no responders available for request: no JetStream answers on that server (is JetStream enabled?)")

	// The embedded store held by a process that does not serve it.
	t.Setenv("JETPOOL_NATS_URL", "")
	cfg := testenv.Config(t, testenv.Options{DataDir: filepath.Join(dir, "data")})
	holder, err := broker.StartEmbedded(context.Background(), cfg, testenv.Logger(t), broker.ServerOptions{Port: -1})
	require.NoError(t, err)
	code, _, stderr = jetpool(t, "status")
	holder.Close()
	require.Equal(t, 3, code, stderr)
	require.Contains(t, stderr, broker.ErrDataDirBusy.Error())
}

// Bare names are not jetpool's: NATS_URL (the nats CLI's own), CONCURRENCY.
func TestUnprefixedVariablesIgnored(t *testing.T) {
	setEnv(t)
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("CONCURRENCY", "0")
	t.Setenv("DATA_DIR", "/nonexistent")
	code, stdout, stderr := jetpool(t, "status")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "no jobs", "the embedded server in JETPOOL_DATA_DIR, not NATS_URL")
}

func TestVersion(t *testing.T) {
	setEnv(t)
	code, stdout, _ := jetpool(t, "version")
	require.Equal(t, 0, code)
	require.Regexp(t, `^jetpool \S+ \(commit \S+.*; `+regexp.QuoteMeta(runtime.Version())+` `+runtime.GOOS+`/`+runtime.GOARCH+`\)\n$`, stdout)
	_, again, _ := jetpool(t, "--version")
	require.Equal(t, stdout, again)

	// As -ldflags "-X main.version=… -X main.commit=…" sets them (e2e
	// builds the binary so and checks it).
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3", "0123abc"
	_, stdout, _ = jetpool(t, "version")
	require.True(t, strings.HasPrefix(stdout, "jetpool v1.2.3 (commit 0123abc"), stdout)
	_, stdout, _ = jetpool(t, "version", "--json")
	require.Contains(t, stdout, `"version": "v1.2.3"`)
	require.Contains(t, stdout, `"go": "`+runtime.Version()+`"`)
}

// Each shell's completion script parses, names every command, and
// completes commands, subcommands, flags and fixed arguments; a flag's
// value and other arguments are left to the shell's file names.
func TestCompletion(t *testing.T) {
	setEnv(t)
	dir, scripts := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "in.jsonl"), nil, 0o600))
	script := func(shell string) string {
		code, stdout, stderr := jetpool(t, "completion", shell)
		require.Equal(t, 0, code, stderr)
		for _, c := range commands {
			require.Contains(t, stdout, c.name, "%s script names %s", shell, c.name)
		}
		for _, f := range []string{"input", "no-progress", "reason", "yes"} {
			require.Contains(t, stdout, f, "%s script has --%s", shell, f)
		}
		p := filepath.Join(scripts, "jetpool."+shell)
		require.NoError(t, os.WriteFile(p, []byte(stdout), 0o600))
		return p
	}
	var all []string
	for _, c := range commands {
		all = append(all, c.name)
	}
	cases := []struct {
		line string // the command line up to the cursor
		want string // what the script offers, space-separated; "FILES": the shell's file names
	}{
		{"jetpool ", strings.Join(all, " ")},
		{"jetpool dl", "dlq"},
		{"jetpool -", "--help --version"},
		{"jetpool dlq ", "list show purge"},
		{"jetpool dlq list --re", "--reason --record"},
		{"jetpool dlq purge --job j --y", "--yes"},
		{"jetpool run --in", "--input"},
		{"jetpool run wf.yaml --no-p", "--no-preflight --no-progress"},
		{"jetpool run --input ", "FILES"},
		{"jetpool run ", "FILES"},
		{"jetpool completion ", "bash zsh fish"},
		{"jetpool help st", "status"},
	}
	words := func(line string) []string { return strings.Split(line, " ") }

	t.Run("bash", func(t *testing.T) {
		bash := needTool(t, "bash")
		p := script("bash")
		out, err := exec.Command(bash, "-n", p).CombinedOutput()
		require.NoError(t, err, "bash -n: %s", out)
		prog := `source "$1"
c() { COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); COMPREPLY=(); _jetpool
      if ((${#COMPREPLY[@]})); then echo "${COMPREPLY[*]}"; else echo FILES; fi; }
`
		for _, tc := range cases {
			prog += "c" + shellWords(words(tc.line)) + "\n"
		}
		assertCompletions(t, exec.Command(bash, "-c", prog, "bash", p), cases)
	})
	t.Run("zsh", func(t *testing.T) {
		zsh := needTool(t, "zsh")
		p := script("zsh")
		out, err := exec.Command(zsh, "-n", p).CombinedOutput()
		require.NoError(t, err, "zsh -n: %s", out)
		// The completion system's functions, as stubs that print what
		// they are given, filtered by the word being completed as
		// _describe does.
		prog := `compdef() { : }
_files() { print -r -- FILES }
_describe() { local -a names; names=(${${(P)4}%%:*}); print -r -- ${(j: :)${(M)names:#${words[CURRENT]}*}} }
source "$1"
c() { words=("$@"); CURRENT=$#; _jetpool }
`
		for _, tc := range cases {
			prog += "c" + shellWords(words(tc.line)) + "\n"
		}
		assertCompletions(t, exec.Command(zsh, "-f", "-c", prog, "zsh", p), cases)
	})
	t.Run("fish", func(t *testing.T) {
		fish := needTool(t, "fish")
		p := script("fish")
		out, err := exec.Command(fish, "-n", p).CombinedOutput()
		require.NoError(t, err, "fish -n: %s", out)
		prog := "source " + p + "\n"
		for _, tc := range cases {
			// Each answer on one line: its candidates without their descriptions.
			prog += "echo (complete -C" + fishQuote(tc.line) + " | string replace -r '\\t.*' '')\n"
		}
		cmd := exec.Command(fish, "--no-config", "-c", prog)
		cmd.Dir = dir // its one file, in.jsonl, is what file names offer
		// fish sorts what it offers.
		fishCases := slices.Clone(cases)
		for i := range fishCases {
			if fishCases[i].want == "FILES" {
				fishCases[i].want = "in.jsonl"
			}
			fishCases[i].want = sortWords(fishCases[i].want)
		}
		assertCompletions(t, cmd, fishCases, sortWords)
	})
}

func sortWords(s string) string {
	w := strings.Fields(s)
	slices.Sort(w)
	return strings.Join(w, " ")
}

// assertCompletions runs cmd, which prints one line per case: what the
// script offered there (through norm, if given).
func assertCompletions(t *testing.T, cmd *exec.Cmd, cases []struct{ line, want string }, norm ...func(string) string) {
	t.Helper()
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	require.Len(t, got, len(cases), "%s", out)
	for i, tc := range cases {
		g := strings.TrimSpace(got[i])
		for _, f := range norm {
			g = f(g)
		}
		require.Equal(t, tc.want, g, "completing %q", tc.line)
	}
}

// shellWords quotes words for a POSIX shell's command line.
func shellWords(ws []string) string {
	var sb strings.Builder
	for _, w := range ws {
		sb.WriteString(" '" + strings.ReplaceAll(w, "'", `'\''`) + "'")
	}
	return sb.String()
}
