package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/provider"
)

// What deploy/ documents must exist and run: every path it names exists,
// every `jetpool …` command it shows parses (its command and flags are
// jetpool's), and the commands of the compose walk-through, the worker's
// and the purge CronJob's arguments and environment run for real against a
// server with deploy/nats/accounts.conf.

// docFiles are the files of deploy/ that document paths and commands: the
// README and the comments of every manifest and config.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "compose/compose.yaml", "compose/.env.example"}
	for _, glob := range []string{"k8s/*.yaml", "nats/*.conf"} {
		m, err := filepath.Glob(glob)
		require.NoError(t, err)
		files = append(files, m...)
	}
	return files
}

// pathRE finds repository paths in prose: deploy/…, examples/…, docs/… from
// the repository root; k8s/…, nats/…, compose/… from deploy/; ../… from the
// file's own directory. A match inside a URL or an absolute path is skipped.
var pathRE = regexp.MustCompile(`(?:^|[\s(\x60'"=\[])((?:\.\./)+[\w.-][\w./-]*|(?:deploy|examples|docs|k8s|nats|compose)/[\w./-]*)`)

func TestDocumentedPathsExist(t *testing.T) {
	n := 0
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range pathRE.FindAllStringSubmatch(line, -1) {
				p := strings.TrimRight(m[1], ".,:;)")
				var full string
				switch {
				case strings.HasPrefix(p, "../"):
					full = filepath.Join(filepath.Dir(f), p)
				case strings.HasPrefix(p, "deploy/"), strings.HasPrefix(p, "examples/"), strings.HasPrefix(p, "docs/"):
					full = filepath.Join("..", p)
				default:
					full = p
				}
				if strings.ContainsAny(p, "*<") || strings.Contains(line, "nats-box") || (p == "nats/nats" && strings.Contains(line, "helm ")) {
					continue // a pattern, a placeholder, a pod (kubectl exec deploy/nats-box), the chart nats/nats
				}
				_, err := os.Stat(full)
				assert.NoError(t, err, "%s:%d names %s", f, i+1, p)
				n++
			}
		}
	}
	assert.Greater(t, n, 20, "the scan found the paths it should")
}

// jetpoolBin builds the CLI once for the tests of this file.
var jetpoolBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "jetpool-deploy-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "jetpool")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/jetpool/jetpool/cmd/jetpool").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return "go build ./cmd/jetpool: " + e.err.Error() + "\n" + e.out }

func binary(t *testing.T) string {
	t.Helper()
	bin, err := jetpoolBin()
	require.NoError(t, err)
	return bin
}

// inlineRE finds `jetpool …` in backticks, in prose and in comments.
var inlineRE = regexp.MustCompile("`(jetpool [^`]+)`")

// Every `jetpool …` deploy/ shows names a jetpool command (or several:
// `jetpool status|results`) and only flags that command has.
func TestDocumentedCommandsParse(t *testing.T) {
	bin := binary(t)
	seen := map[string]bool{}
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(f)
		require.NoError(t, err)
		var cmds []string
		for _, m := range inlineRE.FindAllStringSubmatch(string(data), -1) {
			cmds = append(cmds, m[1])
		}
		cmds = append(cmds, shellCommands(string(data))...)
		for _, c := range cmds {
			args := jetpoolArgs(c)
			if args == nil || seen[strings.Join(args, " ")] {
				continue
			}
			seen[strings.Join(args, " ")] = true
			for _, sub := range strings.Split(args[0], "|") {
				words := []string{sub}
				if len(args) > 1 && (sub == "job" || sub == "dlq") && !strings.HasPrefix(args[1], "-") {
					words = append(words, args[1])
				}
				out, err := exec.Command(bin, append(words, "-h")...).CombinedOutput()
				require.NoError(t, err, "%s: `%s`: jetpool %s -h:\n%s", f, c, strings.Join(words, " "), out)
				for _, a := range args[1:] {
					if name, ok := strings.CutPrefix(a, "--"); ok && name != "" {
						name, _, _ = strings.Cut(name, "=")
						flag := regexp.MustCompile(`(?m)^\s+--?` + regexp.QuoteMeta(name) + `(\s|$)`)
						assert.Regexp(t, flag, string(out), "%s: `%s`: jetpool %s has no flag --%s", f, c, sub, name)
					}
				}
			}
		}
	}
	for _, want := range []string{"dispatch", "status", "worker", "job purge --yes", "job purge --dry-run"} {
		found := false
		for k := range seen {
			found = found || strings.HasPrefix(k, want)
		}
		assert.True(t, found, "deploy/ documents `jetpool %s`", want)
	}
}

// jetpoolArgs are the arguments of a jetpool command line (after any
// VAR=value assignments), or nil when it is no jetpool command.
func jetpoolArgs(cmd string) []string {
	f := strings.Fields(cmd)
	for len(f) > 0 && strings.Contains(f[0], "=") && !strings.HasPrefix(f[0], "-") {
		f = f[1:]
	}
	if len(f) < 2 || f[0] != "jetpool" || strings.Contains(f[1], "…") {
		return nil // no jetpool command, or prose about one (`jetpool …`)
	}
	return f[1:]
}

// shellCommands returns the commands of the ```sh blocks of Markdown text,
// continuation lines joined, comments and blank lines dropped.
func shellCommands(md string) []string {
	var out []string
	in := false
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(md))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "```sh"):
			in = true
			continue
		case strings.HasPrefix(line, "```"):
			in = false
			continue
		case !in:
			continue
		}
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		if s, ok := strings.CutSuffix(line, "\\"); ok {
			cur += s + " "
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// The compose walk-through's host commands (README.md), and the worker and
// purge CronJob as the manifests run them, against a nats-server with the
// shipped accounts: the dispatcher publishes the quickstart, a worker as
// the worker user works it, the operator watches it and purges.
func TestDocumentedCommandsRun(t *testing.T) {
	bin := binary(t)
	s := startServer(t)
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	url := s.ClientURL()
	// What differs here from the documented setting: the server's address,
	// one node (R1), and metrics on a free loopback port.
	local := strings.NewReplacer("nats://127.0.0.1:4222", url, "nats://nats.jetpool.svc.cluster.local:4222", url,
		"JETPOOL_REPLICAS=3", "JETPOOL_REPLICAS=1")
	nats := natsCLI(t)
	path := filepath.Dir(bin)
	if nats != "" {
		path += string(os.PathListSeparator) + filepath.Dir(nats)
	}
	env := []string{"PATH=" + path + string(os.PathListSeparator) + os.Getenv("PATH"), "JETPOOL_LOG_LEVEL=warn"}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "JETPOOL_") && !strings.HasPrefix(kv, "NATS_") {
			env = append(env, kv)
		}
	}
	for k, v := range testPasswords {
		env = append(env, k+"="+v)
	}
	sh := func(cmd string, extra ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, "sh", "-c", cmd)
		c.Dir = ".." // the repository root, as the README says
		c.Env = append(append([]string{}, env...), extra...)
		out, err := c.CombinedOutput()
		require.NoError(t, err, "%s\n%s", cmd, out)
		return string(out)
	}

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	ran := map[string]bool{}
	runHost := func(first string) {
		t.Helper()
		for _, c := range shellCommands(string(readme)) {
			args := jetpoolArgs(c)
			isNats := strings.HasPrefix(c, "nats --server")
			if (args == nil || args[0] != first) && !(isNats && first == "nats") {
				continue
			}
			sh(local.Replace(c))
			ran[first] = true
		}
	}
	runHost("dispatch")

	// The worker as the Deployment runs it: its args and environment.
	dep := byKind(decodeAll(t, "k8s/worker-deployment.yaml"), "Deployment")
	c := dig(dep, "spec", "template", "spec", "containers", 0)
	wenv := manifestEnv(t, c, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_REPLICAS": "1",
		"JETPOOL_METRICS_ADDR": "127.0.0.1:0", "JETPOOL_NATS_PASSWORD": testPasswords[passwordVar("acme-worker")]})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := exec.CommandContext(ctx, bin, toStrings(dig(c, "args"))...)
	w.Env = append(append([]string{}, env...), wenv...)
	var wout syncBuffer
	w.Stdout, w.Stderr = &wout, &wout
	require.NoError(t, w.Start())
	defer func() { _ = w.Process.Kill(); _ = w.Wait() }()

	op := []string{"JETPOOL_NATS_URL=" + url, "JETPOOL_NATS_USER=acme-operator", "JETPOOL_NATS_PASSWORD=" + testPasswords[passwordVar("acme-operator")]}
	testenv.Eventually(t, 60*time.Second, func() bool {
		var st []struct {
			Total     int64 `json:"total"`
			Succeeded int64 `json:"succeeded"`
			Failed    int64 `json:"failed"`
		}
		out := sh("jetpool status --json", op...)
		require.NoError(t, json.Unmarshal([]byte(out), &st), out)
		return len(st) == 1 && st[0].Total == 200 && st[0].Succeeded+st[0].Failed == 200
	}, "the worker works the dispatched quickstart; worker output:\n%s", &wout)
	runHost("status")
	if nats != "" {
		runHost("nats")
	} else {
		ran["nats"] = true // skipped locally: not installed (natsCLI)
	}

	// The purge CronJob: its args and environment.
	cj := byKind(decodeAll(t, "k8s/purge-cronjob.yaml"), "CronJob")
	pc := dig(cj, "spec", "jobTemplate", "spec", "template", "spec", "containers", 0)
	penv := manifestEnv(t, pc, map[string]string{"JETPOOL_NATS_URL": url, "JETPOOL_REPLICAS": "1",
		"JETPOOL_NATS_PASSWORD": testPasswords[passwordVar("acme-operator")]})
	out := sh("jetpool "+strings.Join(toStrings(dig(pc, "args")), " "), penv...)
	// The job finished within JETPOOL_CONSUMER_GRACE: nothing is removed (the
	// purge may be the first of the operator's commands to see it finished:
	// the README's status runs as the viewer, which writes no job state).
	assert.Regexp(t, `^(nothing to purge|job \S+ had finished: marked completed)\n$`, out)

	require.NoError(t, w.Process.Signal(syscall.SIGTERM))
	require.NoError(t, w.Wait(), "the worker drains and exits 0:\n%s", &wout)
	assert.NotContains(t, wout.String(), "Permissions Violation")
	for _, want := range []string{"dispatch", "status", "nats"} {
		assert.True(t, ran[want], "README.md's compose section runs `%s`", want)
	}
}

// manifestEnv is a container's env as VAR=value, values from Secrets given
// in set (which also overrides plain values).
func manifestEnv(t *testing.T, container any, set map[string]string) []string {
	t.Helper()
	var out []string
	for _, e := range dig(container, "env").([]any) {
		name := dig(e, "name").(string)
		v, ok := set[name]
		if !ok {
			v, ok = dig(e, "value").(string)
		}
		require.True(t, ok, "env %s: no value for the test", name)
		out = append(out, name+"="+v)
	}
	return out
}

// natsCLI finds the nats CLI (PATH, then $(go env GOPATH)/bin); missing, the
// README's nats command is skipped locally and fails the test on CI.
func natsCLI(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nats"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			if p := filepath.Join(dir, "bin", "nats"); fileExists(p) {
				return p
			}
		}
	}
	require.Empty(t, os.Getenv("CI"), "the nats CLI is not installed: go install github.com/nats-io/natscli/nats@v0.5.0")
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// The worker's drain fits inside the grace its orchestrator gives it, with
// the margin docs and manifests promise, and covers a call of the default
// provider timeout.
func TestDrainFitsGrace(t *testing.T) {
	const margin = 20 * time.Second
	drainOf := func(args []string) time.Duration {
		t.Helper()
		for i, a := range args {
			if a == "--drain" && i+1 < len(args) {
				d, err := time.ParseDuration(args[i+1])
				require.NoError(t, err)
				return d
			}
		}
		t.Fatalf("no --drain in %v", args)
		return 0
	}
	dep := byKind(decodeAll(t, "k8s/worker-deployment.yaml"), "Deployment")
	grace := time.Duration(dig(dep, "spec", "template", "spec", "terminationGracePeriodSeconds").(int)) * time.Second
	drain := drainOf(toStrings(dig(dep, "spec", "template", "spec", "containers", 0, "args")))
	assert.Equal(t, grace-margin, drain, "Kubernetes: drain = terminationGracePeriodSeconds - 20s")
	assert.GreaterOrEqual(t, drain, provider.TimeoutDefault, "a call of the default provider timeout finishes")

	for _, tenant := range tenants {
		w := dig(decodeAll(t, "compose/compose.yaml")[0], "services", "worker-"+tenant)
		stop, err := time.ParseDuration(dig(w, "stop_grace_period").(string))
		require.NoError(t, err)
		assert.Equal(t, stop-margin, drainOf(toStrings(dig(w, "command"))), "compose: drain = stop_grace_period - 20s")
	}
}

// syncBuffer is a bytes buffer safe for a child's output and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
