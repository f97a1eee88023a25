package worker

import (
	"context"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// call makes one model call: the single place every provider request goes
// through, so shared limits and circuit breaking wrap it.
func (jr *jobRunner) call(ctx context.Context, providerName string, pr provider.Provider, req provider.Request) (provider.Response, error) {
	start := jr.p.cfg.Clock.Now()
	jr.p.calls.Add(1)
	resp, err := pr.Call(ctx, req)
	if err != nil {
		e := retry.AsError(err)
		jr.p.cfg.Metrics.Call(providerName, e.Class, jr.p.cfg.Clock.Now().Sub(start), provider.Usage{})
		return provider.Response{}, e
	}
	jr.p.cfg.Metrics.Call(providerName, "", jr.p.cfg.Clock.Now().Sub(start), resp.Usage)
	return resp, nil
}
