package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
)

// BenchmarkDispatchExternal is the dispatch row of `jetpool bench
// --external` alone, side by side in one run: each iteration publishes the
// bench's records once with the plain nats.go async publisher
// (publishRaw, Nats-Msg-Id, as the "nats.go async pub" row) and dispatches
// them once as a new job, against one nats-server process. It reports both
// rates and their ratio (the median of the iterations'):
//
//	go test ./internal/bench -run '^$' -bench DispatchExternal -benchtime 5x
//
// JETPOOL_BENCH_RECORDS sets the records (default 100,000 of 1 KiB).
func BenchmarkDispatchExternal(b *testing.B) {
	bin := findNatsServer("")
	if bin == "" {
		b.Skip("no nats-server on PATH or in $GOPATH/bin")
	}
	n := benchRecords(100000)
	ctx := b.Context()
	cfg := testenv.Config(b, testenv.Options{})
	cfg.LogLevel = "error"
	h := &harness{o: Options{Records: n, Size: 1024}.withDefaults(), cfg: cfg, log: cfg.Logger(), dir: b.TempDir()}
	s, stop, err := h.startExternal(ctx, cfg, bin, "2m")
	if err != nil {
		b.Fatal(err)
	}
	defer stop()
	wf, err := writeWorkflow(h.dir, "zero", "reply: ok", "", "")
	if err != nil {
		b.Fatal(err)
	}
	in := filepath.Join(h.dir, "records.jsonl")
	if err := writeRecords(in, n, 1024); err != nil {
		b.Fatal(err)
	}
	var pubs, disps, ratios []float64
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.b.JS.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "BENCHRAW", Subjects: []string{"benchraw.>"},
			Storage: jetstream.FileStorage}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := publishRaw(ctx, s.b, "benchraw.x", fmt.Sprintf("raw%d-", i), n, 1024, nil); err != nil {
			b.Fatal(err)
		}
		pub := float64(n) / time.Since(start).Seconds()
		_ = s.b.JS.DeleteStream(ctx, "BENCHRAW")
		start = time.Now()
		res, err := s.d.Dispatch(ctx, wf, dispatcher.Options{Input: in, JobID: fmt.Sprintf("bench-dispatch-%d", i)})
		if err != nil {
			b.Fatal(err)
		}
		disp := float64(res.Published) / time.Since(start).Seconds()
		if _, err := s.b.DeleteJob(ctx, res.Job.ID); err != nil {
			b.Fatal(err)
		}
		pubs, disps, ratios = append(pubs, pub), append(disps, disp), append(ratios, disp/pub)
	}
	b.ReportMetric(medianOf(pubs), "pub-rec/s")
	b.ReportMetric(medianOf(disps), "dispatch-rec/s")
	b.ReportMetric(medianOf(ratios), "ratio")
}

func medianOf(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// benchRecords is $JETPOOL_BENCH_RECORDS, the records of a benchmark of
// this package, or def.
func benchRecords(def int) int {
	if v, err := strconv.Atoi(os.Getenv("JETPOOL_BENCH_RECORDS")); err == nil && v > 0 {
		return v
	}
	return def
}
