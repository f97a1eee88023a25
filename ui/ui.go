// Package ui is jetpool's web dashboard: jobs and their progress, a job's
// records and each record's story, dead letters with their Jetpool-*
// headers (replay and purge them with the filters of `jetpool retry` and
// `dlq purge`), providers' shared limiter state and the live workers.
//
// It reads the streams and buckets the CLI reads — JETPOOL_JOBS,
// JETPOOL_RESULTS, JETPOOL_DLQ, JETPOOL_LIMITS, the jetpool.ctl.stats
// scatter-gather — through the same code (internal/jobstatus, deadletter,
// ratelimit, and the jetpool Client), so it keeps no state of its own and never
// disagrees with `jetpool status`.
//
// # The page
//
// Plain HTML, CSS and JavaScript embedded in the binary (no build step, no
// CDN: it works offline); the page polls a small JSON API under /api/ for
// live updates, at Config.Poll.
//
// # Safety
//
//   - Loopback by default. Listen refuses an address off loopback unless a
//     token is configured (Config.Token, from JETPOOL_UI_TOKEN); with a
//     token every request must carry it (a session cookie set by the login
//     form, or Authorization: Bearer).
//   - Without a token, a request whose Host is not a loopback name is
//     refused, so a web page that rebinds its own domain to 127.0.0.1 can
//     not read the dashboard.
//   - Every mutating action is a POST carrying the CSRF token of the
//     page's cookie (double submit) and passing net/http's cross-origin
//     protection.
//   - Config.ReadOnly hides the actions and refuses their requests.
package ui

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
)

// Defaults of Config.
const (
	// PollDefault is how often the page refreshes what it shows.
	PollDefault = 2 * time.Second
	// PollMin bounds Config.Poll from below: each refresh of a job's page
	// costs a few server-side counts.
	PollMin = 500 * time.Millisecond
)

// TokenEnv is the environment variable holding the dashboard's token.
const TokenEnv = "JETPOOL_UI_TOKEN"

// Config configures a Handler.
type Config struct {
	// Client is what the dashboard reads and replays through (status,
	// workers, Retry with its checks and warnings). Nil: a Client of B.
	Client *jetpool.Client
	// B is the broker the dashboard reads dead letters, results and
	// limiter state from. Required unless Client is set.
	B *broker.Broker
	// ReadOnly hides replay and purge and refuses their requests.
	ReadOnly bool
	// Token, when set, is required of every request. Listen refuses an
	// address off loopback without one.
	Token string
	// Poll is how often the page refreshes (PollDefault; at least PollMin).
	Poll time.Duration
	// Replayed, when set, is told the jobs whose dead letters a replay from
	// the page sent back to the work stream, and returns a note for the
	// page. `jetpool ui` on the embedded server works them there, as
	// `jetpool retry` does. Unset, the page names the jobs no live worker
	// serves (jetpool.Client.Unserved).
	Replayed func(jobs []string) string
	// Log gets one line per mutating action.
	Log zerolog.Logger
}

//go:embed static
var static embed.FS

// Handler serves the dashboard. Mount it at the root of its own server or
// under a prefix with http.StripPrefix.
type Handler struct {
	cfg     Config
	mux     *http.ServeMux
	session string // the session cookie's value when a token is set
	guard   http.Handler
	hist    history // the rates the charts show
}

// New makes a Handler.
func New(cfg Config) (*Handler, error) {
	switch {
	case cfg.Client != nil:
		cfg.B = cfg.Client.Broker()
	case cfg.B == nil:
		return nil, errors.New("ui: Config.Client or Config.B is required")
	default:
		cfg.Client = jetpool.NewClient(cfg.B, &jetpool.Config{Logger: &cfg.Log})
	}
	cfg.Poll = max(cmp.Or(cfg.Poll, PollDefault), PollMin)
	h := &Handler{cfg: cfg, mux: http.NewServeMux()}
	if cfg.Token != "" {
		h.session = sessionValue(cfg.Token)
	}
	files, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	h.routes(files)
	h.guard = http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.serve))
	return h, nil
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.guard.ServeHTTP(w, r) }

func (h *Handler) serve(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "no-referrer")
	if h.cfg.Token == "" && !loopbackHost(r.Host) {
		writeError(w, http.StatusForbidden, fmt.Errorf("host %q is not a loopback name: without %s the dashboard answers only on loopback", r.Host, TokenEnv))
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) routes(files fs.FS) {
	m := h.mux
	m.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	m.HandleFunc("GET /login", h.loginPage())
	m.HandleFunc("POST /login", h.login)
	m.HandleFunc("POST /logout", h.logout)
	m.Handle("GET /{$}", h.authed(h.index(files)))

	m.Handle("GET /api/session", h.authed(http.HandlerFunc(h.apiSession)))
	m.Handle("GET /api/jobs", h.authed(http.HandlerFunc(h.apiJobs)))
	m.Handle("GET /api/jobs/{job}", h.authed(h.jobHandler(h.apiJob)))
	m.Handle("GET /api/jobs/{job}/results", h.authed(h.jobHandler(h.apiResults)))
	m.Handle("GET /api/jobs/{job}/history", h.authed(h.jobHandler(h.apiHistory)))
	m.Handle("GET /api/jobs/{job}/records/{record}", h.authed(h.jobHandler(h.apiRecord)))
	m.Handle("GET /api/dlq", h.authed(http.HandlerFunc(h.apiDLQ)))
	m.Handle("GET /api/dlq/{seq}", h.authed(http.HandlerFunc(h.apiDeadLetter)))
	m.Handle("POST /api/dlq/replay", h.authed(h.mutating(h.apiReplay)))
	m.Handle("POST /api/dlq/purge", h.authed(h.mutating(h.apiPurge)))
	m.Handle("POST /api/dlq/{seq}/replay", h.authed(h.mutating(h.apiReplayOne)))
	m.Handle("POST /api/dlq/{seq}/purge", h.authed(h.mutating(h.apiPurgeOne)))
	m.Handle("POST /api/jobs/{job}/{what}", h.authed(h.mutating(h.apiSteer))) // cancel, pause, resume, priority
	m.Handle("GET /api/providers", h.authed(http.HandlerFunc(h.apiProviders)))
}

// Server is a Handler listening on an address.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
	log  zerolog.Logger
}

// Listen checks addr (CheckAddr), listens on it and serves a Handler of
// cfg until Stop.
func Listen(addr string, cfg Config) (*Server, error) {
	if err := CheckAddr(addr, cfg.Token); err != nil {
		return nil, err
	}
	h, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("ui: %w", err)
	}
	// A name such as "localhost" is checked again by what it bound.
	if err := CheckAddr(ln.Addr().String(), cfg.Token); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{ln: ln, done: make(chan struct{}), log: cfg.Log,
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error().Err(err).Msg("dashboard server")
		}
	}()
	return s, nil
}

// URL is where the dashboard is served.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/" }

// Stop stops serving, letting requests in progress finish until ctx is done.
func (s *Server) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return err
}

// CheckAddr refuses a listen address off loopback (an unspecified host
// such as ":8080" or "0.0.0.0:8080", a non-loopback IP, or any name but
// "localhost") when no token is set.
func CheckAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("ui: address %q: %w", addr, err)
	}
	if token != "" || loopbackName(host) {
		return nil
	}
	return fmt.Errorf("ui: address %q is not loopback: set %s to a secret token to serve the dashboard off loopback", addr, TokenEnv)
}

// loopbackName reports whether host (no port) is a loopback IP or "localhost".
func loopbackName(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost is loopbackName for a Host header, which may carry a port.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
	}
	return loopbackName(host)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
