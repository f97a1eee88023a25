package main

import (
	"context"
	"io"
	"path/filepath"

	jp "github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/export"
)

// SortChunkRecords is how many results `results --sorted` sorts in memory
// at once (export.SortChunkDefault).
const SortChunkRecords = export.SortChunkDefault

// sortChunkRecords is SortChunkRecords, smaller in tests.
var sortChunkRecords = SortChunkRecords

// writeResults writes the job's results to path in the format its
// extension names (CSV, Parquet), for run and retry --output; a JSONL
// output is written by summarize, in the pass that counts.
func writeResults(ctx context.Context, b *broker.Broker, job *broker.Job, path string) error {
	o := export.Options{Format: export.FormatOf(path), TmpDir: filepath.Dir(path), SortChunk: sortChunkRecords}
	if wf, err := jp.CurrentWorkflow(job); err == nil {
		o.Carry, o.Workflow = wf.Carry, wf
	}
	_, err := export.ToFile(path, func(w io.Writer) (export.Counts, error) { return export.Write(ctx, b, job, w, o) })
	return err
}
