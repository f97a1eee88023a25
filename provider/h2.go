package provider

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// transport is every adapter's RoundTripper. An https request goes over
// HTTP/2 on a connection of its own pool (h2Pool): one dial at a time a
// host, shared by every call waiting for a stream. net/http's Transport
// negotiates HTTP/2 on connections its HTTP/1 pool dials, one for each
// request that finds no connection with a free stream: a pool starting
// hundreds of calls at once, or running more calls than the server's
// streams a connection, shook hands hundreds of times to keep a few dozen
// connections (docs/performance.md). Plain http, a request through a proxy
// ($HTTPS_PROXY), and a host that does not speak HTTP/2 go through
// net/http's Transport (h1) as before.
type transport struct {
	h1   *http.Transport
	pool *h2Pool
	// noH2 holds the hosts (host:port) that did not negotiate HTTP/2: their
	// requests go to h1 from then on.
	noH2 sync.Map
}

// errNoH2 is a connection on which the server chose HTTP/1.1 over HTTP/2
// (ALPN): the request goes to h1 instead.
var errNoH2 = errors.New("the server did not negotiate HTTP/2")

// h2PingAfter is how long an HTTP/2 connection may receive nothing before
// it is pinged, and h2PingTimeout how long the ping may go unanswered before
// the connection is closed and its calls fail as transport errors (retried):
// a connection a NAT or a load balancer dropped silently would otherwise
// hold its calls until their timeouts, which may be many minutes.
const (
	h2PingAfter   = 30 * time.Second
	h2PingTimeout = 15 * time.Second
)

func newTransport(h1 *http.Transport) *transport {
	dialer := h1.Clone()
	dialer.HTTP2 = &http.HTTP2Config{SendPingTimeout: h2PingAfter, PingTimeout: h2PingTimeout}
	return &transport{h1: h1, pool: &h2Pool{dialer: dialer, conns: map[string][]*h2Conn{}, dialing: map[string]*h2Dial{}}}
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" || t.proxied(req) {
		return t.h1.RoundTrip(req)
	}
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), "443")
	}
	if _, no := t.noH2.Load(addr); no {
		return t.h1.RoundTrip(req)
	}
	for refused := 0; ; refused++ {
		cc, err := t.pool.get(req.Context(), addr)
		if errors.Is(err, errNoH2) {
			t.noH2.Store(addr, struct{}{})
			return t.h1.RoundTrip(req) // nothing of req was sent
		}
		if err != nil {
			return nil, err
		}
		resp, err := cc.RoundTrip(req)
		if err == nil || !unsent(err) || refused == maxRefused {
			return resp, err
		}
		// What the server did not process is sent again, by the rules of
		// net/http's own HTTP/2 pool (unsent).
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// maxRefused bounds how often one request is sent again (unsent).
const maxRefused = 6

// unsent reports whether err says that the server did not process the
// request, as net/http's HTTP/2 pool decides it (http2canRetryError): a
// stream it reset with REFUSED_STREAM, or with PROTOCOL_ERROR (Go's
// server answers so a stream opened past its limit), a connection that
// could take no stream when the request came to be written, or one the
// server was shutting down (GOAWAY) before it read the request. The
// error types are not exported; their text names them.
func unsent(err error) bool {
	s := err.Error()
	return strings.Contains(s, "; REFUSED_STREAM") || strings.Contains(s, "; PROTOCOL_ERROR; received from peer") ||
		strings.HasSuffix(s, "http2: client conn not usable") ||
		strings.HasSuffix(s, "http2: Transport received Server's graceful shutdown GOAWAY")
}

// proxied reports whether h1 would send req through a proxy.
func (t *transport) proxied(req *http.Request) bool {
	if t.h1.Proxy == nil {
		return false
	}
	u, err := t.h1.Proxy(req)
	return err != nil || u != nil
}

// CloseIdleConnections closes both pools' idle connections.
func (t *transport) CloseIdleConnections() {
	t.h1.CloseIdleConnections()
	t.pool.closeIdle()
}

// h2Pool is the HTTP/2 connections of a transport, by host:port. A call
// reserves a stream on a connection that has one free; when none has, one
// connection is dialled for all the calls waiting (not one each).
type h2Pool struct {
	dialer  *http.Transport // makes the connections (NewClientConn)
	mu      sync.Mutex
	conns   map[string][]*h2Conn
	dialing map[string]*h2Dial
}

// h2Conn is a connection of the pool. Until the server's settings are
// read, an HTTP/2 client assumes 100 streams a connection, and a burst sent
// on that assumption to a server that allows fewer is refused stream by
// stream, or worse: a stream the server never answers holds its call to
// its timeout. So a new connection takes at most h2YoungStreams calls until
// it is known: its limit differs from the assumed one (settings read), or
// net/http reported a change (a call done, or more streams).
type h2Conn struct {
	cc    *http.ClientConn
	known atomic.Bool
}

// h2AssumedStreams is the streams an HTTP/2 client assumes a connection
// carries before the server's settings, and h2YoungStreams what the pool
// lets a connection take until it knows better.
const (
	h2AssumedStreams = 100
	h2YoungStreams   = 20
)

// reserve reserves a stream on c, if it has one the pool may take.
func (c *h2Conn) reserve() bool {
	if !c.known.Load() {
		if c.cc.Available()+c.cc.InFlight() != h2AssumedStreams {
			c.known.Store(true)
		} else if c.cc.InFlight() >= h2YoungStreams {
			return false
		}
	}
	return c.cc.Reserve() == nil
}

// h2Dial is a dial in progress; done is closed once err is set (nil: the
// connection joined the pool).
type h2Dial struct {
	done chan struct{}
	err  error
}

// h2DialTimeout bounds a dial and its handshakes.
const h2DialTimeout = 30 * time.Second

// get returns a connection to addr with a stream reserved: the caller
// makes exactly one RoundTrip on it.
func (p *h2Pool) get(ctx context.Context, addr string) (*http.ClientConn, error) {
	for {
		p.mu.Lock()
		conns := p.conns[addr]
		live := conns[:0]
		var found *http.ClientConn
		for _, c := range conns {
			if c.cc.Err() != nil {
				continue
			}
			live = append(live, c)
			if found == nil && c.reserve() {
				found = c.cc
			}
		}
		clear(conns[len(live):])
		p.conns[addr] = live
		if found != nil {
			p.mu.Unlock()
			return found, nil
		}
		d := p.dialing[addr]
		if d == nil {
			d = &h2Dial{done: make(chan struct{})}
			p.dialing[addr] = d
			go p.dial(addr, d)
		}
		p.mu.Unlock()
		select {
		case <-d.done:
			if d.err != nil {
				return nil, d.err
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// dial makes a connection to addr for the pool. It is not tied to the
// context of the call that began it: the calls waiting share it.
func (p *h2Pool) dial(addr string, d *h2Dial) {
	defer func() {
		p.mu.Lock()
		delete(p.dialing, addr)
		p.mu.Unlock()
		close(d.done)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), h2DialTimeout)
	defer cancel()
	cc, err := p.dialer.NewClientConn(ctx, "https", addr)
	if err != nil {
		d.err = err
		return
	}
	// An HTTP/1.1 connection carries one request at a time; an HTTP/2 one,
	// until the server's settings are read, the hundred streams a client
	// assumes.
	if cc.Available() <= 1 {
		_ = cc.Close()
		d.err = errNoH2
		return
	}
	c := &h2Conn{cc: cc}
	cc.SetStateHook(func(*http.ClientConn) { c.known.Store(true) })
	p.mu.Lock()
	p.conns[addr] = append(p.conns[addr], c)
	p.mu.Unlock()
}

// closeIdle closes the pool's connections that carry no call.
func (p *h2Pool) closeIdle() {
	p.mu.Lock()
	var idle []*http.ClientConn
	for addr, conns := range p.conns {
		live := conns[:0]
		for _, c := range conns {
			if c.cc.InFlight() == 0 {
				idle = append(idle, c.cc)
				continue
			}
			live = append(live, c)
		}
		clear(conns[len(live):])
		p.conns[addr] = live
	}
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.Close()
	}
}
