package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docCommand is one shell command of a document's ```sh block.
type docCommand struct {
	line    string   // as written, without its comment
	comment string   // what follows # on the line
	args    []string // its words
}

// docCommands reads the shell commands of every ```sh block in the section
// of a markdown file whose heading starts with section.
func docCommands(t *testing.T, path, section string) [][]docCommand {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	_, text, ok := strings.Cut(string(data), "\n## "+section)
	require.True(t, ok, "%s has no section %q", path, section)
	if i := strings.Index(text, "\n## "); i >= 0 {
		text = text[:i]
	}
	var blocks [][]docCommand
	for _, part := range strings.Split(text, "```sh\n")[1:] {
		body, _, _ := strings.Cut(part, "```")
		var block []docCommand
		for _, line := range strings.Split(body, "\n") {
			cmd, comment, _ := strings.Cut(line, " #")
			cmd = strings.TrimSpace(cmd)
			if cmd == "" || strings.HasPrefix(cmd, "#") {
				continue
			}
			require.NotContains(t, cmd, `"`, "%s: %q: the test splits commands at spaces; it does not read quotes", path, cmd)
			block = append(block, docCommand{line: cmd, comment: strings.TrimSpace(comment), args: strings.Fields(cmd)})
		}
		blocks = append(blocks, block)
	}
	require.NotEmpty(t, blocks, "%s, section %q: no ```sh block", path, section)
	return blocks
}

// jetpoolArgs is a documented jetpool command's arguments: `go run
// ./cmd/jetpool ARGS` and `jetpool ARGS` run the binary the tests built.
func jetpoolArgs(c docCommand) ([]string, bool) {
	switch {
	case len(c.args) > 3 && c.args[0] == "go" && c.args[1] == "run" && c.args[2] == "./cmd/jetpool":
		return c.args[3:], true
	case len(c.args) > 1 && c.args[0] == "jetpool":
		return c.args[1:], true
	}
	return nil, false
}

// streamNames are the JETPOOL_ stream names a comment lists (what the
// command is documented to show).
var streamNames = regexp.MustCompile(`JETPOOL_[A-Z]+`)

// TestReadmeCommands runs the commands of README.md's Quickstart, Tests,
// Operations and Performance sections as they are written, so that they
// cannot rot: the quickstart in a fresh directory with the embedded server,
// the `nats` CLI commands against `jetpool server` on that store (between
// the quickstart's run and its retry, while dead letters exist). What cannot
// run inside a test is checked instead: `go test ./...` by `go list` of its
// packages, the bench's flags by -h, and each `go install` of a tool is the
// one .ci/run installs. A command this test does not know fails it.
func TestReadmeCommands(t *testing.T) {
	t.Parallel()
	const readme = "../README.md"
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	work := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(root, "examples"), filepath.Join(work, "examples")))
	env := map[string]string{"JETPOOL_DATA_DIR": filepath.Join(work, ".jetpool"), "JETPOOL_LOG_LEVEL": "warn"}

	runJetpool := func(c docCommand, args []string) result {
		t.Helper()
		cmd := exec.Command(jetpoolBin, args...)
		cmd.Dir, cmd.Env = work, childEnv(env)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		r := result{stdout: stdout.String(), stderr: stderr.String()}
		if err != nil {
			var xe *exec.ExitError
			require.ErrorAs(t, err, &xe, c.line)
			r.code = xe.ExitCode()
		}
		if args[0] == "run" && r.code == 4 {
			// The quickstart's job completes with the failed records its
			// story replays: exit 4, as the README says.
			r.code = 0
		}
		require.Zero(t, r.code, "README: %s\n%s%s", c.line, r.stdout, r.stderr)
		return r
	}
	// run does one documented command of the quickstart (jetpool, export).
	run := func(c docCommand) result {
		t.Helper()
		t.Logf("README: %s", c.line)
		if k, v, ok := strings.Cut(strings.TrimPrefix(c.line, "export "), "="); ok && strings.HasPrefix(c.line, "export ") {
			env[k] = v
			return result{}
		}
		args, ok := jetpoolArgs(c)
		require.True(t, ok, "README: %q: TestReadmeCommands does not know how to run this; teach it", c.line)
		return runJetpool(c, args)
	}

	quickstart := docCommands(t, readme, "Quickstart")
	require.Len(t, quickstart, 2, "the quickstart's run, then the story of a dead letter")
	for _, c := range quickstart[0] {
		r := run(c)
		assert.Contains(t, r.stdout, "200 records", c.line)
	}

	// Operations: the nats CLI on the same store, served by `jetpool server`.
	var job string
	var dead []struct {
		Seq uint64 `json:"seq"`
	}
	{
		st := runJetpool(docCommand{line: "jetpool status --json"}, []string{"status", "--json"})
		var jobs []struct {
			Job string `json:"job"`
		}
		require.NoError(t, json.Unmarshal([]byte(st.stdout), &jobs), st.stdout)
		require.Len(t, jobs, 1)
		job = jobs[0].Job
		dl := runJetpool(docCommand{line: "jetpool dlq list --json"}, []string{"dlq", "list", "--json"})
		for _, line := range strings.Split(strings.TrimSpace(dl.stdout), "\n") {
			var d struct {
				Seq uint64 `json:"seq"`
			}
			require.NoError(t, json.Unmarshal([]byte(line), &d), line)
			dead = append(dead, d)
		}
		require.NotEmpty(t, dead, "the quickstart leaves dead letters")
	}
	srv := start(t, env, "server", "--port", "-1", "--http-port", "0")
	url := srv.waitOutput(t, regexp.MustCompile(`listening on (nats://127\.0\.0\.1:\d+)`), 20*time.Second)
	placeholders := strings.NewReplacer("<job>", job, "<seq>", strconv.FormatUint(dead[0].Seq, 10))
	for _, block := range docCommands(t, readme, "Operations") {
		for _, c := range block {
			require.Equal(t, "nats", c.args[0], "README Operations: %q: only nats CLI commands are expected here", c.line)
			args := strings.Fields(placeholders.Replace(strings.Join(c.args[1:], " ")))
			t.Logf("README: nats %s", strings.Join(args, " ")) // placeholders filled in
			var out string
			if len(args) >= 2 && args[0] == "stream" && args[1] == "view" {
				out = natsCLIOnTerminal(t, url, args...) // "needs a terminal", as its comment says
			} else {
				r := natsCLI(t, url, args...)
				require.Zero(t, r.code, "README: %s\n%s%s", c.line, r.stdout, r.stderr)
				out = r.stdout
			}
			for _, name := range streamNames.FindAllString(c.comment, -1) {
				assert.Contains(t, out, name, "README: %s  # %s", c.line, c.comment)
			}
			if strings.Contains(c.comment, "headers") || args[0] == "stream" && args[1] == "get" {
				assert.Contains(t, out, "Jetpool-Reason: permanent", c.line)
			}
		}
	}
	srv.signal(t, syscall.SIGTERM)
	require.Zero(t, srv.wait(t, 10*time.Second))

	// The rest of the quickstart: the key fixed, the dead letters replayed.
	for _, c := range quickstart[1] {
		r := run(c)
		switch {
		case strings.Contains(c.line, " dlq list"):
			assert.Contains(t, r.stdout, "invalid api key", c.line)
		case strings.Contains(c.line, " retry"):
			assert.Contains(t, r.stdout, "200 succeeded, 0 failed", c.line)
		case strings.Contains(c.line, " status"):
			assert.Regexp(t, `completed\s+200\s+0\s+0\s+0\s+200\s+0\s`, r.stdout, c.line)
		}
	}

	// Tests: `go test ./...` would run this test again; its packages resolve.
	for _, block := range docCommands(t, readme, "Tests") {
		for _, c := range block {
			require.Equal(t, "go test ./...", c.line, "README Tests: teach TestReadmeCommands %q", c.line)
			list := exec.Command("go", "list", "./...")
			list.Dir = root
			out, err := list.CombinedOutput()
			require.NoError(t, err, "go list ./...: %s", out)
			assert.Contains(t, string(out), "github.com/jetpool/jetpool/e2e")
		}
	}

	// Performance: the tools it installs are .ci/run's; what it builds are
	// the module's commands, and their flags parse; its scripts are there.
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	built := map[string]string{} // ./NAME → its package
	for _, block := range docCommands(t, readme, "Performance") {
		for _, c := range block {
			if len(c.args) == 3 && c.args[0] == "go" && c.args[1] == "install" {
				assert.Contains(t, string(ci), c.line, "README installs what .ci/run installs")
				continue
			}
			if len(c.args) == 5 && c.args[0] == "go" && c.args[1] == "build" && c.args[2] == "-o" {
				bin := filepath.Join(t.TempDir(), c.args[3])
				build := exec.Command("go", "build", "-o", bin, c.args[4])
				build.Dir = root
				out, err := build.CombinedOutput()
				require.NoError(t, err, "%s: %s", c.line, out)
				built["./"+c.args[3]] = bin
				continue
			}
			if bin, ok := built[c.args[0]]; ok && c.args[0] != "./jp" {
				t.Logf("README: %s -h", c.line)
				out, err := exec.Command(bin, append(c.args[1:], "-h")...).CombinedOutput()
				require.NoError(t, err, "%s -h: the flags parse: %s", c.line, out)
				continue
			}
			if strings.HasPrefix(c.args[0], "bench/") {
				st, err := os.Stat(filepath.Join(root, c.args[0]))
				require.NoError(t, err, c.line)
				require.NotZero(t, st.Mode()&0o111, "%s: executable", c.line)
				continue
			}
			args, ok := jetpoolArgs(c)
			require.True(t, ok, "README Performance: teach TestReadmeCommands %q", c.line)
			t.Logf("README: %s -h", c.line)
			runJetpool(c, append(args, "-h")) // the flags parse; -h stops before it runs
		}
	}
}
