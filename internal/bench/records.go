package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/jetpool/jetpool/workflow"
)

// writeRecords writes n JSONL records of about size bytes to path, with ids
// r0, r1, ….
func writeRecords(path string, n, size int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	pad := strings.Repeat("x", max(size-40, 1))
	for i := 0; i < n; i++ {
		fmt.Fprintf(w, "{\"id\":\"r%d\",\"text\":\"%s\"}\n", i, pad)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeWorkflow writes dir/name.yaml, one action on the sim provider with
// the sim knobs, limits and retry block given, and loads it.
func writeWorkflow(dir, name, sim, limits, retryBlock string) (*workflow.Workflow, error) {
	p := filepath.Join(dir, name+".yaml")
	y := fmt.Sprintf("name: %s\nproviders:\n  sim: {kind: sim, limits: {%s}, sim: {%s}}\nactions:\n  - name: act\n    provider: sim\n    prompt: \"{{ .text }}\"\n%s",
		name, limits, sim, retryBlock)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		return nil, err
	}
	return workflow.Load(p)
}
