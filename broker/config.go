// Package broker is the only place that knows NATS: the connection, the
// embedded server, the streams, consumers and KV buckets, and the subject and
// header names that make up the operator interface (docs/design.md §4).
package broker

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// Config is the process configuration, read from JETPOOL_* environment variables.
//
// Every envconfig tag is the variable's whole name, read with no prefix:
// envconfig falls back from PREFIX_TAG to the bare TAG, so a tag "NATS_URL"
// under the prefix JETPOOL also read the nats CLI's own NATS_URL (a shell
// set up for `nats` pointed jetpool at that server). A full name is looked
// up once; TestConfigReadsOnlyPrefixedNames keeps every tag so.
type Config struct {
	// NATSURL: unset starts an embedded nats-server under DataDir.
	NATSURL string `envconfig:"JETPOOL_NATS_URL"`
	// DataDir of the embedded server's file store (DataDirDefault).
	DataDir string `envconfig:"JETPOOL_DATA_DIR" default:".jetpool"`

	NATSCreds    string `envconfig:"JETPOOL_NATS_CREDS"`
	NATSNKey     string `envconfig:"JETPOOL_NATS_NKEY"` // path to an nkey seed file
	NATSUser     string `envconfig:"JETPOOL_NATS_USER"`
	NATSPassword string `envconfig:"JETPOOL_NATS_PASSWORD"`
	NATSToken    string `envconfig:"JETPOOL_NATS_TOKEN"`
	TLSCert      string `envconfig:"JETPOOL_NATS_TLS_CERT"`
	TLSKey       string `envconfig:"JETPOOL_NATS_TLS_KEY"`
	TLSCA        string `envconfig:"JETPOOL_NATS_TLS_CA"`

	// Replicas of every stream and bucket jetpool creates (1; 3 on a cluster).
	Replicas int `envconfig:"JETPOOL_REPLICAS" default:"1"`

	LogLevel  string `envconfig:"JETPOOL_LOG_LEVEL" default:"info"`
	LogFormat string `envconfig:"JETPOOL_LOG_FORMAT"` // json | console; console on a terminal when unset

	Concurrency int    `envconfig:"JETPOOL_CONCURRENCY" default:"64"`
	MetricsAddr string `envconfig:"JETPOOL_METRICS_ADDR"`
	// WorkerName names this process in dead letters (Jetpool-Worker) and
	// stats; unset: host-pid.
	WorkerName string `envconfig:"JETPOOL_WORKER_NAME"`

	// SyncInterval is the embedded server's fsync policy: "always", or a
	// duration. SyncIntervalDefault; see docs/durability.md for the trade-off.
	SyncInterval string `envconfig:"JETPOOL_SYNC_INTERVAL" default:"1s"`
	// BatchWrites: "auto" (BatchWritesDefault: on when the embedded server
	// syncs every write, SyncInterval "always"), "on" (a server of your own
	// that syncs every write) or "off". On, the dispatcher publishes a job's
	// records in atomic batches (broker/atomic.go), workers store results
	// in group commits (resultbatch.go), and a new work stream keeps acked
	// records for the workers to purge many at a time (keepacked.go): one
	// fsync for many records instead of one or two each.
	BatchWrites string `envconfig:"JETPOOL_BATCH_WRITES" default:"auto"`

	// AckWait of the work consumers (AckWaitDefault). Records held send
	// InProgress heartbeats at a sixth of it (worker.BeatsPerAckWait).
	AckWait time.Duration `envconfig:"JETPOOL_ACK_WAIT" default:"30s"`
	// MaxAckPending per job consumer. A delayed Nak holds a slot until it
	// is redelivered, so this must cover in-flight plus waiting records.
	MaxAckPending int `envconfig:"JETPOOL_MAX_ACK_PENDING" default:"20000"`
	// DedupeWindow of the work, results and DLQ streams.
	DedupeWindow time.Duration `envconfig:"JETPOOL_DEDUPE_WINDOW" default:"2h"`

	// Lifecycle of finished jobs and the limits of the results and DLQ
	// streams (broker/lifecycle.go, docs/operations.md "Retention").
	//
	// JobRetention: a finished job is deleted this long after it finished
	// (JobRetentionDefault; 0 keeps finished jobs until `jetpool job
	// delete|purge`). Unfinished jobs are never aged out.
	JobRetention time.Duration `envconfig:"JETPOOL_JOB_RETENTION" default:"720h"`
	// ConsumerGrace: a finished job's work consumer is removed this long
	// after the job finished (ConsumerGraceDefault).
	ConsumerGrace time.Duration `envconfig:"JETPOOL_CONSUMER_GRACE" default:"1h"`
	// ResultsMaxBytes and DLQMaxBytes cap those streams (0: no cap on a new
	// stream, an existing stream's cap left as it is; -1: no cap). At the
	// cap new messages are refused, never old ones dropped.
	ResultsMaxBytes ByteSize `envconfig:"JETPOOL_RESULTS_MAX_BYTES"`
	DLQMaxBytes     ByteSize `envconfig:"JETPOOL_DLQ_MAX_BYTES"`
	// Compression of the results and DLQ streams: "none" (CompressionDefault) or "s2".
	Compression string `envconfig:"JETPOOL_COMPRESSION" default:"none"`
}

// Defaults of Config, as documented in the README.
const (
	DataDirDefault       = ".jetpool"
	SyncIntervalDefault  = "1s"
	BatchWritesDefault   = "auto"
	AckWaitDefault       = 30 * time.Second
	ConcurrencyDefault   = 64
	MaxAckPendingDefault = 20000
)

// LoadConfig reads the environment.
func LoadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		var pe *envconfig.ParseError
		if errors.As(err, &pe) {
			return c, fmt.Errorf("%s: %q is not a valid %s", pe.KeyName, pe.Value, pe.TypeName)
		}
		return c, err
	}
	return c, c.Validate()
}

// Validate checks the fields and names the variable at fault.
func (c Config) Validate() error {
	if c.Replicas < 1 || c.Replicas > 5 {
		return fmt.Errorf("JETPOOL_REPLICAS: %d is out of range 1-5", c.Replicas)
	}
	if c.Concurrency < 1 {
		return fmt.Errorf("JETPOOL_CONCURRENCY: %d must be at least 1", c.Concurrency)
	}
	if _, _, err := c.syncPolicy(); err != nil {
		return err
	}
	switch strings.ToLower(c.BatchWrites) {
	case "", "auto", "on", "off":
	default:
		return fmt.Errorf("JETPOOL_BATCH_WRITES: %q is not auto, on or off", c.BatchWrites)
	}
	switch c.LogFormat {
	case "", "json", "console":
	default:
		return fmt.Errorf("JETPOOL_LOG_FORMAT: %q is not json or console", c.LogFormat)
	}
	if _, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel)); err != nil {
		return fmt.Errorf("JETPOOL_LOG_LEVEL: %v", err)
	}
	if c.AckWait < time.Second {
		return fmt.Errorf("JETPOOL_ACK_WAIT: %s is shorter than 1s", c.AckWait)
	}
	// A credentials file that is not there is a configuration error,
	// found before any connection is tried (not a server out of reach).
	for _, f := range []struct{ name, path string }{
		{"JETPOOL_NATS_CREDS", c.NATSCreds}, {"JETPOOL_NATS_NKEY", c.NATSNKey},
		{"JETPOOL_NATS_TLS_CERT", c.TLSCert}, {"JETPOOL_NATS_TLS_KEY", c.TLSKey}, {"JETPOOL_NATS_TLS_CA", c.TLSCA},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return c.validateLifecycle() // broker/lifecycle.go
}

func (c Config) syncPolicy() (always bool, interval time.Duration, err error) {
	s := strings.TrimSpace(strings.ToLower(c.SyncInterval))
	if s == "" {
		s = SyncIntervalDefault
	}
	if s == "always" {
		return true, 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return false, 0, fmt.Errorf("JETPOOL_SYNC_INTERVAL: %q is not \"always\" or a positive duration", c.SyncInterval)
	}
	return false, d, nil
}

// Batched reports whether writes go in atomic batches (BatchWrites): "on",
// or "auto" with an embedded server (NATSURL unset) that syncs every write.
func (c Config) Batched() bool {
	switch strings.ToLower(c.BatchWrites) {
	case "on":
		return true
	case "off":
		return false
	}
	always, _, _ := c.syncPolicy()
	return always && c.NATSURL == ""
}

// Logger builds the process logger: JSON by default, console on a terminal.
func (c Config) Logger() zerolog.Logger {
	lvl, err := zerolog.ParseLevel(strings.ToLower(c.LogLevel))
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	format := c.LogFormat
	if format == "" {
		format = "json"
		if term.IsTerminal(int(os.Stderr.Fd())) {
			format = "console"
		}
	}
	var l zerolog.Logger
	if format == "console" {
		l = zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: "15:04:05"})
	} else {
		l = zerolog.New(os.Stderr)
	}
	return l.Level(lvl).With().Timestamp().Logger()
}
