package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/dispatcher"
	"github.com/jetpool/jetpool/internal/testenv"
	"github.com/jetpool/jetpool/worker"
)

// What a tenant's budget costs a run that never reaches it: three jobs of
// 1000 records with max_cost, two pools at concurrency 32, 5 ms calls, with
// and without a tenant budget over them. Reports records/s and the writes
// of the job states and of the tenant's ledger. Figures: docs/performance.md.
//
//	go test ./worker -run '^$' -bench BenchmarkTenantBudget -benchtime 1x -v
func BenchmarkTenantBudget(b *testing.B) {
	for _, tenant := range []bool{false, true} {
		b.Run(fmt.Sprintf("tenant=%v", tenant), func(b *testing.B) {
			for range b.N {
				runTenantBench(b, tenant)
			}
		})
	}
}

func runTenantBench(b *testing.B, tenant bool) {
	const jobs, records = 3, 1000
	ctx := context.Background()
	bill, wf := tenantBillFor(b, 5*time.Millisecond)
	br := testenv.Broker(b)
	if tenant {
		require.NoError(b, br.SetTenantBudget(ctx, 100))
	}
	var ids []string
	for i := range jobs {
		id := fmt.Sprintf("j%d", i+1)
		testenv.Dispatch(b, br, wf(", max_cost: 100"), testenv.Records(b, records), dispatcher.Options{JobID: id})
		ids = append(ids, id)
	}
	begin := time.Now()
	testenv.Pool(b, br, worker.Config{Concurrency: 32})
	testenv.Pool(b, br, worker.Config{Concurrency: 32})
	for _, id := range ids {
		_, p := testenv.WaitFinished(b, br, id, 2*time.Minute)
		require.EqualValues(b, records, p.OK)
	}
	took := time.Since(begin)
	require.Len(b, bill.Lines(), jobs*records)
	seq := func(stream string) float64 {
		s, err := br.JS.Stream(ctx, stream)
		require.NoError(b, err)
		return float64(s.CachedInfo().State.LastSeq)
	}
	b.ReportMetric(float64(jobs*records)/took.Seconds(), "records/s")
	b.ReportMetric(seq("KV_"+broker.BucketJobState), "job-state-writes")
	b.ReportMetric(seq("KV_"+broker.BucketTenant), "tenant-writes")
}
