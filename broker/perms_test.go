package broker_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/internal/testenv"
)

// MayPublish says what the server says of the connection's user: a
// read-only user may not write a job state, a writer may, deny wins over
// allow, and a user without permissions (the embedded server's) may
// publish anywhere.
func TestMayPublish(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "server.conf")
	require.NoError(t, os.WriteFile(conf, []byte(`listen: 127.0.0.1:-1
jetstream: enabled
accounts {
  T {
    jetstream: enabled
    users: [
      {user: reader, password: r1, permissions: {publish: {allow: ["$JS.API.>", "jetpool.ctl.stats", "$SYS.REQ.USER.INFO"], deny: ["$JS.API.STREAM.PURGE.>"]}}}
      {user: writer, password: w1, permissions: {publish: {allow: ["$KV.JETPOOL_JOB_STATE.*", "$SYS.REQ.USER.INFO"]}}}
      {user: mute, password: m1, permissions: {publish: {allow: ["$JS.API.>"]}}}
      {user: all, password: a1}
    ]
  }
}
`), 0o600))
	opts, err := server.ProcessConfigFile(conf)
	require.NoError(t, err)
	opts.StoreDir, opts.NoLog, opts.NoSigs = t.TempDir(), true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })

	as := func(user, pw string) *broker.Broker {
		cfg := testenv.Config(t, testenv.Options{})
		cfg.NATSURL, cfg.NATSUser, cfg.NATSPassword = s.ClientURL(), user, pw
		b, err := broker.Connect(context.Background(), cfg, testenv.Logger(t))
		require.NoError(t, err)
		t.Cleanup(b.Close)
		return b
	}
	ctx := context.Background()
	state := "$KV." + broker.BucketJobState + ".job1"
	for _, tc := range []struct {
		user, pw, subject string
		want              bool
	}{
		{"reader", "r1", state, false},
		{"reader", "r1", "$JS.API.STREAM.INFO.JETPOOL_WORK", true},
		{"reader", "r1", "$JS.API.STREAM.PURGE.JETPOOL_WORK", false},
		{"reader", "r1", "jetpool.ctl.stats", true},
		{"reader", "r1", "jetpool.ctl.stats.more", false},
		{"writer", "w1", state, true},
		{"writer", "w1", state + ".deeper", false},
		{"all", "a1", state, true},
		// It may not ask: the server does not say, and the write is tried.
		{"mute", "m1", state, true},
	} {
		require.Equal(t, tc.want, as(tc.user, tc.pw).MayPublish(ctx, tc.subject), "%s may publish %s", tc.user, tc.subject)
	}
	require.True(t, testenv.Broker(t).MayPublish(ctx, state), "the embedded server's user")
}
