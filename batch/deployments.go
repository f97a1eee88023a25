package batch

import (
	"fmt"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/workflow"
)

// A provider with deployments (provider.Deployment) takes each batch at
// one of them: Config.Deployment picks it when the batch is recorded, the
// header keeps it (Header.Deployment), and the batch is submitted, found
// after a crash, polled and read there, whoever owns it then. A batch
// cannot move: its provider id means nothing to another deployment, and
// submitting it elsewhere after a lost answer could pay for it twice. A
// straggler's next round is a new batch, picked again.

// client is the batch client of the action's provider, or of its
// deployment dep ("": the provider).
func (b *Batcher) client(a *workflow.Action, dep string) (Client, error) {
	key := a.Provider
	if dep != "" {
		key += "/" + dep
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.clients[key]; ok {
		return c, nil
	}
	c, err := b.cfg.Client(a, dep)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoClient, err)
	}
	b.clients[key] = c
	return c, nil
}

// endpointClient is the default Config.Client: NewClient of the provider's
// configuration, or of its deployment's.
func (b *Batcher) endpointClient(a *workflow.Action, dep string) (Client, error) {
	cfg, err := endpoint(b.cfg.Workflow, a.Provider, dep)
	if err != nil {
		return nil, err
	}
	return NewClient(cfg)
}

// endpoint is the configuration of the provider called name in wf, or of
// its deployment dep.
func endpoint(wf *workflow.Workflow, name, dep string) (provider.Config, error) {
	cfg := wf.Providers[name]
	if dep == "" {
		return cfg, nil
	}
	for _, e := range cfg.Endpoints() {
		if len(cfg.Deployments) > 0 && e.Name == dep {
			return e, nil
		}
	}
	return provider.Config{}, fmt.Errorf("provider %s has no deployment %s", name, dep)
}

// inTurn is the default Config.Deployment: the provider's deployments one
// batch each, in turn.
func (b *Batcher) inTurn(a *workflow.Action) string {
	cfg := b.cfg.Workflow.Providers[a.Provider]
	if len(cfg.Deployments) == 0 {
		return ""
	}
	eps := cfg.Endpoints()
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.turns[a.Provider] % len(eps)
	b.turns[a.Provider]++
	return eps[i].Name
}
