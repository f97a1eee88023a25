package provider

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
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
	// A connection dialled before the server's settings are read takes the
	// hundred streams an HTTP/2 client assumes until then: strict, the calls
	// past the server's real limit wait for a stream on it rather than fail.
	// The pool reserves no more than that limit once it is known.
	dialer.HTTP2 = &http.HTTP2Config{StrictMaxConcurrentRequests: true,
		SendPingTimeout: h2PingAfter, PingTimeout: h2PingTimeout}
	return &transport{h1: h1, pool: &h2Pool{dialer: dialer, conns: map[string][]*http.ClientConn{}, dialing: map[string]*h2Dial{}}}
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
		// A stream the server refused was not processed (RFC 9113), and a
		// connection found unusable before the request was written sent
		// nothing: sent again, as net/http's own pool does. A new
		// connection's first burst meets both when the server allows fewer
		// streams than the hundred a client assumes until its settings are
		// read.
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
// request: a stream it reset with REFUSED_STREAM, or a connection that
// could take no stream when the request came to be written. net/http's
// error types for them are not exported; their text names them.
func unsent(err error) bool {
	s := err.Error()
	return strings.Contains(s, "; REFUSED_STREAM") || strings.HasSuffix(s, "http2: client conn not usable")
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
	conns   map[string][]*http.ClientConn
	dialing map[string]*h2Dial
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
		for _, cc := range conns {
			if cc.Err() != nil {
				continue
			}
			live = append(live, cc)
			if found == nil && cc.Reserve() == nil {
				found = cc
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
	p.mu.Lock()
	p.conns[addr] = append(p.conns[addr], cc)
	p.mu.Unlock()
}

// closeIdle closes the pool's connections that carry no call.
func (p *h2Pool) closeIdle() {
	p.mu.Lock()
	var idle []*http.ClientConn
	for addr, conns := range p.conns {
		live := conns[:0]
		for _, cc := range conns {
			if cc.InFlight() == 0 {
				idle = append(idle, cc)
				continue
			}
			live = append(live, cc)
		}
		clear(conns[len(live):])
		p.conns[addr] = live
	}
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.Close()
	}
}
