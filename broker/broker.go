package broker

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
)

// Broker is a connection to JetStream, and the embedded server when jetpool
// started one.
type Broker struct {
	NC  *nats.Conn
	JS  jetstream.JetStream
	Cfg Config
	Log zerolog.Logger

	srv  *server.Server // the embedded server this broker owns (Close shuts it down)
	lock *os.File
	// url and inproc are how this connection was made: Dup makes another
	// the same way (in-process to an embedded server).
	url    string
	inproc *server.Server

	reconnects *reconnects // broker/reconnect.go

	mu      sync.Mutex
	kv      map[string]jetstream.KeyValue
	streams map[string]jetstream.Stream

	perms perms // broker/perms.go

	watch *storeWatch // an embedded server's disk (broker/storewatch.go)
}

// ServerFile is written into the data dir by `jetpool server`, so other local
// processes connect to it instead of starting a second server on one store.
const ServerFile = "server.json"

// ErrDataDirBusy is returned when another process holds the embedded store.
var ErrDataDirBusy = errors.New("data dir is in use by another jetpool process")

// Embedded reports whether the broker runs its own in-process server.
func (b *Broker) Embedded() bool { return b.srv != nil }

// Server returns the embedded server, or nil.
func (b *Broker) Server() *server.Server { return b.srv }

// ServerOptions configure an embedded server (used by `jetpool server`).
type ServerOptions struct {
	Host     string // loopback only by default
	Port     int    // -1: random
	HTTPPort int    // monitoring; 0: off
	HTTPHost string // monitoring's listen address; "": Host
	// Token, or User and Password, turn client auth on (off by default:
	// loopback only). The broker's own connection uses Config's credentials.
	Token, User, Password string
}

// Connect connects to cfg.NATSURL, or starts an embedded server under
// cfg.DataDir when it is unset. When `jetpool server` already serves that
// data dir, Connect connects to it.
func Connect(ctx context.Context, cfg Config, log zerolog.Logger) (*Broker, error) {
	if cfg.NATSURL != "" {
		return dial(ctx, cfg, log, cfg.NATSURL, nil)
	}
	return StartEmbedded(ctx, cfg, log, ServerOptions{Host: "127.0.0.1", Port: -1})
}

// StartEmbedded starts an in-process nats-server with JetStream and connects to it.
func StartEmbedded(ctx context.Context, cfg Config, log zerolog.Logger, so ServerOptions) (*Broker, error) {
	dir := cfg.DataDir
	if dir == "" {
		dir = DataDirDefault
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("data dir %s: %w", dir, err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		// Someone else owns the store: if it is a `jetpool server`, use it.
		if url := readServerFile(dir); url != "" {
			log.Debug().Str("url", url).Msg("connecting to the jetpool server that owns the data dir")
			return dial(ctx, cfg, log, url, nil, nats.SetCustomDialer(&serverFileDialer{dir: dir, d: net.Dialer{Timeout: 2 * time.Second}}))
		}
		return nil, fmt.Errorf("%s: %w; run `jetpool server` and point every process at it with JETPOOL_NATS_URL", dir, err)
	}
	// A server file left by a process that was killed names a server that
	// is gone: whoever holds the lock now writes its own, or none.
	_ = os.Remove(filepath.Join(dir, ServerFile))
	always, interval, err := cfg.syncPolicy()
	if err != nil {
		lock.Close()
		return nil, err
	}
	host := so.Host
	if host == "" {
		host = "127.0.0.1"
	}
	opts := &server.Options{
		ServerName:   "jetpool-embedded",
		Host:         host,
		Port:         so.Port,
		HTTPHost:     host,
		HTTPPort:     so.HTTPPort,
		JetStream:    true,
		StoreDir:     filepath.Join(dir, "jetstream"),
		SyncAlways:   always,
		SyncInterval: interval,
		NoSigs:       true,
		NoLog:        true,
		MaxPayload:   8 << 20,
	}
	if so.Port == 0 {
		opts.Port = -1
	}
	if free, err := freeSpace(dir); err == nil {
		// Set as nats-server would set it, but explicit: storeWatch may
		// raise an explicit limit as the disk grows, not a derived one.
		opts.JetStreamMaxStore = storeLimit(dirBytes(opts.StoreDir), free)
	}
	if so.HTTPHost != "" {
		opts.HTTPHost = so.HTTPHost
	}
	opts.Authorization, opts.Username, opts.Password = so.Token, so.User, so.Password
	if so.HTTPPort == 0 {
		opts.HTTPPort = 0
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("embedded nats-server: %w", err)
	}
	if log.GetLevel() <= zerolog.TraceLevel {
		srv.ConfigureLogger()
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		lock.Close()
		return nil, errors.New("embedded nats-server did not become ready in 30s")
	}
	b, err := dial(ctx, cfg, log, srv.ClientURL(), srv)
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		lock.Close()
		return nil, err
	}
	b.lock = lock
	b.watchStore(opts, dir)
	return b, nil
}

func dial(ctx context.Context, cfg Config, log zerolog.Logger, url string, srv *server.Server, extra ...nats.Option) (*Broker, error) {
	rc := newReconnects()
	opts := []nats.Option{
		nats.Name("jetpool"),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected")
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			rc.fire()
			log.Info().Str("url", nc.ConnectedUrlRedacted()).Msg("nats reconnected")
		}),
	}
	if srv != nil {
		opts = append(opts, nats.InProcessServer(srv))
	} else {
		// A server that stops answering (frozen, partitioned) is noticed in
		// 10-15 s and left for another node, instead of the library's 4
		// minutes: a worker behind it can neither store nor heartbeat, and
		// its records would outlive AckWait (30 s) and be paid again.
		opts = append(opts, nats.PingInterval(5*time.Second), nats.MaxPingsOutstanding(2))
	}
	if cfg.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(cfg.NATSCreds))
	}
	if cfg.NATSNKey != "" {
		o, err := nats.NkeyOptionFromSeed(cfg.NATSNKey)
		if err != nil {
			return nil, fmt.Errorf("JETPOOL_NATS_NKEY: %w", err)
		}
		opts = append(opts, o)
	}
	if cfg.NATSUser != "" {
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword))
	}
	if cfg.NATSToken != "" {
		opts = append(opts, nats.Token(cfg.NATSToken))
	}
	if cfg.TLSCert != "" || cfg.TLSCA != "" {
		tc, err := tlsConfig(cfg)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(url, append(opts, extra...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact(url), err)
	}
	// The dispatcher keeps at most dispatcher.MaxPendingDefault (4096)
	// publishes unacknowledged; the library's own limit sits above that so
	// a slow store (fsync always) slows publishing down instead of failing it.
	// An async publish whose ack never comes (a stream leader lost with
	// the message) fails after PublishAckTimeout instead of waiting forever.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(16384), jetstream.WithPublishAsyncTimeout(PublishAckTimeout))
	if err != nil {
		nc.Close()
		return nil, err
	}
	return &Broker{NC: nc, JS: js, Cfg: cfg, Log: log, srv: srv, url: url, inproc: srv, reconnects: rc,
		kv: map[string]jetstream.KeyValue{}, streams: map[string]jetstream.Stream{}}, nil
}

// PublishAckTimeout bounds the wait for an async publish's ack (dispatch,
// result writes).
const PublishAckTimeout = 30 * time.Second

func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("JETPOOL_NATS_TLS_CERT/KEY: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if cfg.TLSCA != "" {
		pem, err := os.ReadFile(cfg.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("JETPOOL_NATS_TLS_CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("JETPOOL_NATS_TLS_CA: %s holds no PEM certificate", cfg.TLSCA)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

func redact(url string) string {
	if i, j := strings.IndexByte(url, '@'), strings.IndexByte(url, '/'); i > 0 && j >= 0 {
		return url[:j+2] + "***" + url[i:]
	}
	return url
}

// Close drains the connection and stops the embedded server.
func (b *Broker) Close() {
	if b == nil {
		return
	}
	if b.lock != nil {
		// First, so no process reads the file of a server that is stopping.
		_ = os.Remove(filepath.Join(filepath.Dir(b.lock.Name()), ServerFile))
	}
	if b.watch != nil {
		b.watch.close()
	}
	if b.NC != nil {
		_ = b.NC.Drain()
		b.NC.Close()
	}
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	if b.lock != nil {
		b.lock.Close()
	}
}

// WriteServerFile records the URL of this embedded server in the data dir,
// where other local processes find it (Connect); Close removes it.
func (b *Broker) WriteServerFile(url string) error {
	if b.lock == nil {
		return nil
	}
	data, _ := json.Marshal(map[string]string{"url": url})
	return os.WriteFile(filepath.Join(filepath.Dir(b.lock.Name()), ServerFile), data, 0o600)
}

func readServerFile(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, ServerFile))
	if err != nil {
		return ""
	}
	var m map[string]string
	if json.Unmarshal(data, &m) != nil {
		return ""
	}
	return m["url"]
}

func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, ErrDataDirBusy
	}
	return f, nil
}

// Dup opens another connection to b's server, made as b's was (in-process
// to an embedded server, with the same URL and credentials otherwise) and
// named name for operators (`nats server report connections`). Its Close
// closes only that connection.
func (b *Broker) Dup(ctx context.Context, name string) (*Broker, error) {
	d, err := dial(ctx, b.Cfg, b.Log, b.url, b.inproc, nats.Name(name))
	if err != nil {
		return nil, err
	}
	d.srv = nil // b owns the server
	return d, nil
}
