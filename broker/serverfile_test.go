package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// A process using the store another hosts (`jetpool ui` beside `jetpool
// run`) follows it when that process is restarted on another port.
func TestFollowsTheStoreHostAcrossRestarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := testenv.Config(t, testenv.Options{})
	host := func() *broker.Broker {
		t.Helper()
		b, err := broker.StartEmbedded(ctx, cfg, testenv.Logger(t), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
		require.NoError(t, err)
		require.NoError(t, b.WriteServerFile(b.Server().ClientURL()))
		return b
	}
	first := host()
	user, err := broker.StartEmbedded(ctx, cfg, testenv.Logger(t), broker.ServerOptions{Host: "127.0.0.1", Port: -1})
	require.NoError(t, err, "the store is held: the file's server is dialed")
	defer user.Close()
	require.Equal(t, first.Server().ClientURL(), user.NC.ConnectedUrl())
	first.Close()

	second := host()
	defer second.Close()
	require.NotEqual(t, first.Server().ClientURL(), second.Server().ClientURL())
	testenv.Eventually(t, 20*time.Second, func() bool {
		_, err := user.JS.AccountInfo(ctx)
		return err == nil && user.NC.ConnectedServerId() == second.Server().ID()
	}, "the user reconnected to the restarted host")
}
