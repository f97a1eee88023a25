package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// BenchmarkClusterJob runs jobs of 2,000 zero-latency records on three
// in-process nodes (R3) with one pool of 64, and reports records a second:
// what a cluster's own writes per record cost (the result, the ack, on R3
// the claim of the call: worker/handle.go twin). JETPOOL_BENCH_SYNC=always
// makes every node fsync every write.
//
//	go test ./e2e -run '^$' -bench BenchmarkClusterJob -benchtime 3x
func BenchmarkClusterJob(b *testing.B) {
	const n = 2000
	c := startCluster(b, func(o *server.Options) { o.SyncAlways = os.Getenv("JETPOOL_BENCH_SYNC") == "always" })
	admin := readyCluster(b, c)
	testenv.Pool(b, clusterBroker(b, c.urls()), worker.Config{Concurrency: 64})
	wf := simWorkflow(b, 0, "")
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		job := dispatch(b, admin, wf, n, fmt.Sprintf("bench-%d-%d", b.N, i))
		waitFinished(b, admin, job.ID, 5*time.Minute)
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "records/s")
	b.StopTimer()
	if st := claims(b, admin); st.Msgs > 0 {
		b.ReportMetric(float64(st.Bytes)/float64(st.Msgs), "claim-bytes")
	}
}
