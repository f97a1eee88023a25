package deploy_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A store whose streams predate a setting (here: no compression) keeps
// working for a worker that may not update streams: its Ensure tries, is
// refused, and goes on with the streams as they are; the operator's next
// Ensure applies the setting.
func TestWorkerKeepsOlderStreams(t *testing.T) {
	s := startServer(t)
	defer func() {
		s.Shutdown()
		s.WaitForShutdown()
	}()
	ctx := context.Background()
	as := func(user string, edit func(*broker.Config)) *broker.Broker {
		t.Helper()
		cfg := testenv.Config(t, testenv.Options{})
		cfg.NATSURL, cfg.NATSUser, cfg.NATSPassword = s.ClientURL(), user, testPasswords[passwordVar(user)]
		if edit != nil {
			edit(&cfg)
		}
		b, err := broker.Connect(ctx, cfg, testenv.Logger(t))
		require.NoError(t, err)
		t.Cleanup(b.Close)
		return b
	}
	compression := func(b *broker.Broker) jetstream.StoreCompression {
		t.Helper()
		st, err := b.JS.Stream(ctx, broker.StreamResults)
		require.NoError(t, err)
		return st.CachedInfo().Config.Compression
	}
	op := as("acme-operator", nil) // the default: no compression
	require.NoError(t, op.Ensure(ctx))
	require.Equal(t, jetstream.NoCompression, compression(op))

	s2 := func(c *broker.Config) { c.Compression = "s2" }
	w := as("acme-worker", s2) // wants s2, may not update streams
	start := time.Now()
	require.NoError(t, w.Ensure(ctx), "a worker on an older store starts")
	t.Logf("worker Ensure with two refused updates: %s", time.Since(start).Round(time.Millisecond))
	assert.Equal(t, jetstream.NoCompression, compression(w))
	require.NoError(t, w.WriteResult(ctx, &broker.Result{ID: "r1", Job: "j", Action: "a", Status: broker.StatusOK}))

	require.NoError(t, as("acme-operator", s2).Ensure(ctx))
	assert.Equal(t, jetstream.S2Compression, compression(op), "the operator's Ensure updates it")
}
