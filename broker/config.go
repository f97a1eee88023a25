// Package broker is the only place that knows NATS: the connection, the
// embedded server, the streams, consumers and KV buckets, and the subject and
// header names that make up the operator interface (docs/design.md §4).
package broker

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/rs/zerolog"
	"golang.org/x/term"
)

// Config is the process configuration, read from JETPOOL_* environment variables.
type Config struct {
	// NATSURL: unset starts an embedded nats-server under DataDir.
	NATSURL string `envconfig:"NATS_URL"`
	// DataDir of the embedded server's file store (DataDirDefault).
	DataDir string `envconfig:"DATA_DIR" default:".jetpool"`

	NATSCreds    string `envconfig:"NATS_CREDS"`
	NATSNKey     string `envconfig:"NATS_NKEY"` // path to an nkey seed file
	NATSUser     string `envconfig:"NATS_USER"`
	NATSPassword string `envconfig:"NATS_PASSWORD"`
	NATSToken    string `envconfig:"NATS_TOKEN"`
	TLSCert      string `envconfig:"NATS_TLS_CERT"`
	TLSKey       string `envconfig:"NATS_TLS_KEY"`
	TLSCA        string `envconfig:"NATS_TLS_CA"`

	// Replicas of every stream and bucket jetpool creates (1; 3 on a cluster).
	Replicas int `envconfig:"REPLICAS" default:"1"`

	LogLevel  string `envconfig:"LOG_LEVEL" default:"info"`
	LogFormat string `envconfig:"LOG_FORMAT"` // json | console; console on a terminal when unset

	Concurrency int    `envconfig:"CONCURRENCY" default:"64"`
	MetricsAddr string `envconfig:"METRICS_ADDR"`

	// SyncInterval is the embedded server's fsync policy: "always", or a
	// duration. SyncIntervalDefault; see docs/durability.md for the trade-off.
	SyncInterval string `envconfig:"SYNC_INTERVAL" default:"1s"`

	// AckWait of the work consumers (AckWaitDefault). Long calls send
	// InProgress heartbeats at a third of it.
	AckWait time.Duration `envconfig:"ACK_WAIT" default:"30s"`
	// MaxAckPending per job consumer. A delayed Nak holds a slot until it
	// is redelivered, so this must cover in-flight plus waiting records.
	MaxAckPending int `envconfig:"MAX_ACK_PENDING" default:"20000"`
	// DedupeWindow of the work, results and DLQ streams.
	DedupeWindow time.Duration `envconfig:"DEDUPE_WINDOW" default:"2h"`
}

// Defaults of Config, as documented in the README.
const (
	DataDirDefault       = ".jetpool"
	SyncIntervalDefault  = "1s"
	AckWaitDefault       = 30 * time.Second
	ConcurrencyDefault   = 64
	MaxAckPendingDefault = 20000
)

// LoadConfig reads the environment.
func LoadConfig() (Config, error) {
	var c Config
	if err := envconfig.Process("JETPOOL", &c); err != nil {
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
	return nil
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
