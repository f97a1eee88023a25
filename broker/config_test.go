package broker_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/broker"
)

// envNames is every variable Config reads, by field name.
func envNames(t *testing.T) map[string]string {
	t.Helper()
	names := map[string]string{}
	typ := reflect.TypeFor[broker.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		names[f.Name] = f.Tag.Get("envconfig")
	}
	return names
}

// envconfig falls back from PREFIX_TAG to the bare TAG, and to the bare
// field name when a field has no tag: every field's tag must be its whole
// JETPOOL_ name (read with no prefix), or nothing outside JETPOOL_* can be
// kept out.
func TestConfigReadsOnlyPrefixedNames(t *testing.T) {
	for field, name := range envNames(t) {
		require.True(t, strings.HasPrefix(name, "JETPOOL_"), "Config.%s: envconfig tag %q must be the full JETPOOL_ name", field, name)
		require.Equal(t, strings.ToUpper(name), name, "Config.%s", field)
	}
}

// clearEnv unsets every variable Config reads, prefixed and bare, for the test.
func clearEnv(t *testing.T) {
	for _, name := range envNames(t) {
		for _, n := range []string{name, strings.TrimPrefix(name, "JETPOOL_")} {
			t.Setenv(n, "") // restored after the test
			require.NoError(t, os.Unsetenv(n))
		}
	}
}

// NATS_URL is the nats CLI's own variable: a shell set up for `nats` must
// not point jetpool at that server, and no other bare name configures it.
func TestLoadConfigIgnoresUnprefixedNames(t *testing.T) {
	clearEnv(t)
	for _, name := range envNames(t) {
		// Values that would be refused, or would show, if they were read.
		t.Setenv(strings.TrimPrefix(name, "JETPOOL_"), "0")
	}
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	t.Setenv("DATA_DIR", "/nonexistent")
	t.Setenv("NATS_CREDS", "/nonexistent/creds")
	t.Setenv("LOG_LEVEL", "bogus")
	c, err := broker.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, broker.Config{DataDir: broker.DataDirDefault, Replicas: 1, LogLevel: "info",
		Concurrency: broker.ConcurrencyDefault, SyncInterval: broker.SyncIntervalDefault, BatchWrites: broker.BatchWritesDefault,
		AckWait: broker.AckWaitDefault, MaxAckPending: broker.MaxAckPendingDefault, DedupeWindow: 2 * time.Hour,
		JobRetention: broker.JobRetentionDefault, ConsumerGrace: broker.ConsumerGraceDefault, Compression: broker.CompressionDefault}, c)
}

// Every JETPOOL_ variable is still read, and lands in its field.
func TestLoadConfigReadsEveryVariable(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o600))
		return p
	}
	want := broker.Config{
		NATSURL: "nats://127.0.0.1:4222", DataDir: filepath.Join(dir, "data"),
		NATSCreds: file("creds"), NATSNKey: file("nkey"), NATSUser: "u", NATSPassword: "p", NATSToken: "tok",
		TLSCert: file("cert"), TLSKey: file("key"), TLSCA: file("ca"),
		Replicas: 3, LogLevel: "debug", LogFormat: "console", Concurrency: 7, MetricsAddr: "127.0.0.1:9090",
		SyncInterval: "always", BatchWrites: "off", AckWait: 45 * time.Second, MaxAckPending: 500, DedupeWindow: 10 * time.Minute,
		JobRetention: 48 * time.Hour, ConsumerGrace: 10 * time.Minute, ResultsMaxBytes: 1 << 30, DLQMaxBytes: 1 << 20, Compression: "s2",
		WorkerName: "w1",
	}
	set := map[string]string{
		"NATSURL": want.NATSURL, "DataDir": want.DataDir, "NATSCreds": want.NATSCreds, "NATSNKey": want.NATSNKey,
		"NATSUser": "u", "NATSPassword": "p", "NATSToken": "tok", "TLSCert": want.TLSCert, "TLSKey": want.TLSKey,
		"TLSCA": want.TLSCA, "Replicas": "3", "LogLevel": "debug", "LogFormat": "console", "Concurrency": "7",
		"MetricsAddr": want.MetricsAddr, "SyncInterval": "always", "BatchWrites": "off", "AckWait": "45s", "MaxAckPending": "500",
		"DedupeWindow": "10m", "JobRetention": "48h", "ConsumerGrace": "10m", "ResultsMaxBytes": "1GiB", "DLQMaxBytes": "1MiB",
		"Compression": "s2", "WorkerName": "w1",
	}
	for field, name := range envNames(t) {
		v, ok := set[field]
		require.True(t, ok, "Config.%s (%s) has no value in this test: add one", field, name)
		t.Setenv(name, v)
	}
	c, err := broker.LoadConfig()
	require.NoError(t, err)
	require.Equal(t, want, c)
}

// A bad value names the variable and what it should be.
func TestLoadConfigErrorsNameTheVariable(t *testing.T) {
	clearEnv(t)
	t.Setenv("JETPOOL_CONCURRENCY", "lots")
	_, err := broker.LoadConfig()
	require.EqualError(t, err, `JETPOOL_CONCURRENCY: "lots" is not a valid int`)

	t.Setenv("JETPOOL_CONCURRENCY", "0")
	_, err = broker.LoadConfig()
	require.EqualError(t, err, "JETPOOL_CONCURRENCY: 0 must be at least 1")

	t.Setenv("JETPOOL_CONCURRENCY", "")
	require.NoError(t, os.Unsetenv("JETPOOL_CONCURRENCY"))
	missing := filepath.Join(t.TempDir(), "nope.creds")
	t.Setenv("JETPOOL_NATS_CREDS", missing)
	_, err = broker.LoadConfig()
	require.ErrorContains(t, err, "JETPOOL_NATS_CREDS: stat "+missing)
}
