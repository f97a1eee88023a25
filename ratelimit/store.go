package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/retry"
)

// Store holds the shared States, one per key, with compare-and-set.
type Store interface {
	// Update applies fn to the key's state (the zero State when there is
	// none) and writes it with compare-and-set, retrying on conflict. fn
	// returns false to write nothing. Update returns the state it left.
	Update(ctx context.Context, key string, fn func(*State) bool) (State, error)
	// Watch calls fn with every key's current state, then with each change,
	// until ctx is done. It returns once the initial states were delivered.
	Watch(ctx context.Context, fn func(key string, s State)) error
	// List returns every state.
	List(ctx context.Context) (map[string]State, error)
}

// ErrContention is returned (wrapped) by Update when compare-and-set keeps
// losing to other writers.
var ErrContention = errors.New("ratelimit: too many concurrent updates")

// updateTries bounds compare-and-set retries of one Update.
const updateTries = 100

// KVStore is a Store in the JETPOOL_LIMITS bucket.
type KVStore struct {
	kv jetstream.KeyValue
}

// NewKVStore binds to the JETPOOL_LIMITS bucket of b (created by Ensure).
func NewKVStore(ctx context.Context, b *broker.Broker) (*KVStore, error) {
	kv, err := b.KV(ctx, broker.BucketLimits)
	if err != nil {
		return nil, err
	}
	return &KVStore{kv: kv}, nil
}

// Update implements Store.
func (s *KVStore) Update(ctx context.Context, key string, fn func(*State) bool) (State, error) {
	for range updateTries {
		var st State
		var rev uint64
		e, err := s.kv.Get(ctx, key)
		switch {
		case err == nil:
			rev = e.Revision()
			if err := json.Unmarshal(e.Value(), &st); err != nil {
				st = State{} // unreadable: start over rather than block the provider
			}
		case errors.Is(err, jetstream.ErrKeyNotFound):
		default:
			return State{}, err
		}
		if !fn(&st) {
			return st, nil
		}
		data, err := json.Marshal(&st)
		if err != nil {
			return State{}, err
		}
		if rev == 0 {
			_, err = s.kv.Create(ctx, key, data)
		} else {
			_, err = s.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return st, nil
		}
		if !broker.IsConflict(err) {
			return State{}, err
		}
		// Another writer won: a short random pause spreads the next tries
		// of writers that lost together (on R3 each try is a round trip to
		// the bucket's leader, and a read may come from a follower behind it).
		if err := (retry.SystemClock{}).Sleep(ctx, contentionPause()/10); err != nil {
			return State{}, err
		}
	}
	return State{}, fmt.Errorf("%s: %w", key, ErrContention)
}

// contentionPause is a random pause of 5-25 ms after losing a
// compare-and-set race.
func contentionPause() time.Duration {
	return 5*time.Millisecond + rand.N(20*time.Millisecond)
}

// Watch implements Store.
func (s *KVStore) Watch(ctx context.Context, fn func(key string, s State)) error {
	w, err := broker.WatchAll(ctx, s.kv)
	if err != nil {
		return err
	}
	initial := make(chan struct{})
	go func() {
		defer func() { _ = w.Stop() }()
		closed := false
		for {
			select {
			case <-ctx.Done():
				if !closed {
					close(initial)
				}
				return
			case e, ok := <-w.Updates():
				if !ok {
					if !closed {
						close(initial)
					}
					return
				}
				if e == nil {
					if !closed {
						closed = true
						close(initial)
					}
					continue
				}
				if e.Operation() != jetstream.KeyValuePut {
					fn(e.Key(), State{})
					continue
				}
				var st State
				if json.Unmarshal(e.Value(), &st) == nil {
					fn(e.Key(), st)
				}
			}
		}
	}()
	select {
	case <-initial:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// List implements Store.
func (s *KVStore) List(ctx context.Context) (map[string]State, error) {
	out := map[string]State{}
	lister, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	for _, k := range keys {
		e, err := s.kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var st State
		if json.Unmarshal(e.Value(), &st) == nil {
			out[k] = st
		}
	}
	return out, nil
}

// MemStore is a Store in memory, for one process and for tests.
type MemStore struct {
	mu       sync.Mutex
	states   map[string]State
	watchers []func(string, State)
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{states: map[string]State{}} }

// Update implements Store.
func (m *MemStore) Update(_ context.Context, key string, fn func(*State) bool) (State, error) {
	m.mu.Lock()
	st := clone(m.states[key])
	if !fn(&st) {
		m.mu.Unlock()
		return st, nil
	}
	m.states[key] = clone(st)
	ws := append([]func(string, State){}, m.watchers...)
	m.mu.Unlock()
	for _, w := range ws {
		w(key, clone(st))
	}
	return st, nil
}

// Watch implements Store.
func (m *MemStore) Watch(ctx context.Context, fn func(string, State)) error {
	m.mu.Lock()
	for k, st := range m.states {
		fn(k, clone(st))
	}
	m.watchers = append(m.watchers, fn)
	m.mu.Unlock()
	return nil
}

// List implements Store.
func (m *MemStore) List(context.Context) (map[string]State, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]State, len(m.states))
	for k, st := range m.states {
		out[k] = clone(st)
	}
	return out, nil
}

func clone(s State) State {
	if s.Leases != nil {
		l := make(map[string]Lease, len(s.Leases))
		for k, v := range s.Leases {
			l[k] = v
		}
		s.Leases = l
	}
	return s
}
