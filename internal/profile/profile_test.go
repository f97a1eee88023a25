package profile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each profile lands in its file, non-empty; an empty heap path writes nothing.
func TestProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, heap := filepath.Join(dir, "cpu.pprof"), filepath.Join(dir, "heap.pprof")
	stop, err := StartCPU(cpu)
	require.NoError(t, err)
	stop()
	WriteHeap(heap)
	WriteHeap("")
	for _, p := range []string{cpu, heap} {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.Positive(t, st.Size(), p)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 2)

	_, err = StartCPU(filepath.Join(dir, "missing", "cpu.pprof"))
	require.Error(t, err)
}
