package jetpool

import (
	"context"
	"encoding/json"
	"errors"
	"iter"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/export"
)

// ResultsParams say which order Results reads in.
type ResultsParams struct {
	// Sorted reads the results in input order (by the record's input
	// line): an external sort over temp files in TmpDir ("": the
	// system's), so memory stays flat whatever the job's size. Unsorted,
	// they come as stored, which is cheaper.
	Sorted bool
	TmpDir string
}

// errStop ends a read whose caller stopped ranging.
var errStop = errors.New("jetpool: stop")

// Results is the job's final results, one per record: ok at the last
// action, or failed at any (Result.Status, Reason and Error say why). A
// read that fails yields the error once, with a nil result, and stops.
//
//	for r, err := range c.Results(ctx, id, jetpool.ResultsParams{Sorted: true}) {
//		if err != nil { ... }
//		fmt.Println(r.ID, r.Status, string(r.Output))
//	}
func (c *Client) Results(ctx context.Context, jobID string, p ResultsParams) iter.Seq2[*broker.Result, error] {
	return func(yield func(*broker.Result, error) bool) {
		j, _, err := c.b.GetJob(ctx, jobID)
		if err != nil {
			yield(nil, err)
			return
		}
		o := export.Options{Sorted: p.Sorted, TmpDir: p.TmpDir}
		err = export.Each(ctx, c.b, j, o, func(r *broker.Result, _ json.RawMessage) error {
			if !yield(r, nil) {
				return errStop
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStop) {
			yield(nil, err)
		}
	}
}
