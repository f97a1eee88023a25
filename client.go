package jetpool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool/broker"
)

// Config configures a Client. Its zero value is usable: every field says
// its default.
type Config struct {
	// Broker is the NATS and store configuration (broker.Config; the
	// environment's JETPOOL_ variables fill it in the CLI). Its zero
	// fields take the defaults of BrokerDefaults; Open and Connect set
	// DataDir and NATSURL from their argument.
	Broker broker.Config
	// Concurrency is the number of concurrent model calls of the workers
	// Run and Work start in this process (broker.ConcurrencyDefault).
	Concurrency int
	// Logger gets the Client's and its workers' logs (default: none).
	Logger *zerolog.Logger
}

// BrokerDefaults is a broker.Config with every default the CLI documents
// (README "Environment"), read from no environment variable.
func BrokerDefaults() broker.Config {
	return broker.Config{DataDir: broker.DataDirDefault, Replicas: 1, LogLevel: "info",
		Concurrency: broker.ConcurrencyDefault, SyncInterval: broker.SyncIntervalDefault, BatchWrites: broker.BatchWritesDefault,
		AckWait: broker.AckWaitDefault, MaxAckPending: broker.MaxAckPendingDefault, DedupeWindow: 2 * time.Hour,
		JobRetention: broker.JobRetentionDefault, ConsumerGrace: broker.ConsumerGraceDefault, Compression: broker.CompressionDefault}
}

// withDefaults fills c's zero fields.
func (c Config) withDefaults() Config {
	d := BrokerDefaults()
	b := &c.Broker
	b.DataDir = cmp.Or(b.DataDir, d.DataDir)
	b.Replicas = cmp.Or(b.Replicas, d.Replicas)
	b.LogLevel = cmp.Or(b.LogLevel, d.LogLevel)
	b.Concurrency = cmp.Or(b.Concurrency, d.Concurrency)
	b.SyncInterval = cmp.Or(b.SyncInterval, d.SyncInterval)
	b.BatchWrites = cmp.Or(b.BatchWrites, d.BatchWrites)
	b.AckWait = cmp.Or(b.AckWait, d.AckWait)
	b.MaxAckPending = cmp.Or(b.MaxAckPending, d.MaxAckPending)
	b.DedupeWindow = cmp.Or(b.DedupeWindow, d.DedupeWindow)
	b.Compression = cmp.Or(b.Compression, d.Compression)
	c.Concurrency = cmp.Or(c.Concurrency, b.Concurrency)
	if c.Logger == nil {
		nop := zerolog.Nop()
		c.Logger = &nop
	}
	return c
}

// Client is jetpool's front door: it dispatches jobs, works them, reads
// their status and results, and replays their dead letters. It is safe for
// concurrent use.
type Client struct {
	b    *broker.Broker
	cfg  Config
	log  zerolog.Logger
	owns bool // Close closes b
}

// Open starts an embedded NATS server (JetStream, file store in dir) and
// returns a Client of it. If a `jetpool server` already serves dir, Open
// connects to it instead. Close stops the server.
func Open(ctx context.Context, dir string, cfg *Config) (*Client, error) {
	c := configOf(cfg)
	c.Broker.NATSURL, c.Broker.DataDir = "", dir
	return dial(ctx, c)
}

// Connect connects to the NATS server or cluster at url (auth and TLS from
// cfg.Broker: NATSCreds, NATSToken, ...). Close closes the connection.
func Connect(ctx context.Context, url string, cfg *Config) (*Client, error) {
	if url == "" {
		return nil, invalid(errors.New("jetpool.Connect: no URL (Open runs an embedded server)"))
	}
	c := configOf(cfg)
	c.Broker.NATSURL = url
	return dial(ctx, c)
}

func configOf(cfg *Config) Config {
	if cfg == nil {
		return Config{}.withDefaults()
	}
	return cfg.withDefaults()
}

func dial(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Broker.Validate(); err != nil {
		return nil, invalid(err)
	}
	b, err := broker.Connect(ctx, cfg.Broker, *cfg.Logger)
	if err != nil {
		return nil, err
	}
	if err := b.Ensure(ctx); err != nil {
		b.Close()
		return nil, fmt.Errorf("jetpool streams: %w", err)
	}
	return &Client{b: b, cfg: cfg, log: *cfg.Logger, owns: true}, nil
}

// NewClient returns a Client of a broker connected (and its streams
// ensured) by the caller, who keeps it: Close leaves it open. cfg.Broker
// is b's configuration.
func NewClient(b *broker.Broker, cfg *Config) *Client {
	c := configOf(cfg)
	return &Client{b: b, cfg: c, log: *c.Logger}
}

// Broker is the Client's connection, for what the Client does not offer.
func (c *Client) Broker() *broker.Broker { return c.b }

// Embedded reports whether the Client runs the NATS server in process.
func (c *Client) Embedded() bool { return c.b.Embedded() }

// Close closes the connection, and stops the embedded server, of a Client
// made by Open or Connect. It is safe to call more than once.
func (c *Client) Close() {
	if c.owns {
		c.b.Close()
	}
}

// Job reads a job's entry. An unknown id is broker.ErrJobNotFound.
func (c *Client) Job(ctx context.Context, id string) (*broker.Job, error) {
	j, _, err := c.b.GetJob(ctx, id)
	return j, err
}
