package worker

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/workflow"
)

// unitVector is a vector shaped like a real embedding's: normal
// components, scaled to length 1 (OpenAI's 1536 of text-embedding-3-small
// are about ±0.025 each).
func unitVector(r *rand.Rand, dims int) []float32 {
	v := make([]float32, dims)
	var n float64
	for i := range v {
		f := r.NormFloat64()
		v[i], n = float32(f), n+f*f
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / math.Sqrt(n))
	}
	return v
}

// BenchmarkEmbedResultSize is the size of one embed action's stored result
// (the JSONL line of results, the message in JETPOOL_RESULTS) for a
// 1536-dimension vector, as JSON numbers and as base64 float32:
//
//	go test ./worker -run '^$' -bench EmbedResultSize -benchtime 200x
func BenchmarkEmbedResultSize(b *testing.B) {
	for _, format := range []string{workflow.EmbedFormatFloat, workflow.EmbedFormatBase64} {
		b.Run(format, func(b *testing.B) {
			a := &workflow.Action{Name: "vec", Kind: workflow.KindEmbed, Embed: workflow.EmbedConfig{Format: format}}
			r := rand.New(rand.NewPCG(1, 2))
			total := 0
			b.ReportAllocs()
			for b.Loop() {
				res := &broker.Result{ID: "r123456", Status: broker.StatusOK, Output: vectorOutput(a, unitVector(r, 1536)),
					Action: "vec", Job: "embed-1a2b3c4d", Provider: "openai", Model: "text-embedding-3-small",
					Usage: broker.Usage{InputTokens: 212}, Recovery: broker.Recovery{Attempts: 1, Deliveries: 1},
					Finished: time.Unix(1_750_000_000, 0).UTC(), Line: 123456, LatencyMS: 212.5}
				out, err := json.Marshal(res)
				if err != nil {
					b.Fatal(err)
				}
				total += len(out)
			}
			b.ReportMetric(float64(total)/float64(b.N), "bytes/result")
		})
	}
}
