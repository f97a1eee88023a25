package providertest

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// NewServerAt is NewServer listening on addr, a loopback address with
// port 0 ("127.0.0.2:0"): a second host on the same machine, to stand for
// one a key is not bound to. Its Requests are everything it was sent.
func NewServerAt(t testing.TB, addr string, h http.Handler) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("providertest: listen on %s: %v", addr, err)
	}
	s := &Server{done: make(chan struct{}), handler: h}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(s.serve)}}
	s.Config.BaseContext = func(net.Listener) context.Context {
		return context.WithValue(context.Background(), doneKey{}, (<-chan struct{})(s.done))
	}
	s.Start()
	t.Cleanup(func() {
		close(s.done)
		s.Close()
	})
	return s
}

// Redirect answers every request with Status and Location: To. To may be
// absolute, scheme-relative ("//host/path") or a path.
type Redirect struct {
	Status int
	To     string
}

func (rd Redirect) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Location", rd.To)
	w.WriteHeader(rd.Status)
}

// Leaks lists where any of secrets appears in reqs — a header (by name), the
// path, the query or the body — as "METHOD /path: where"; nil when nowhere.
func Leaks(reqs []Request, secrets ...string) []string {
	var out []string
	for _, r := range reqs {
		at := func(where string) { out = append(out, r.Method+" "+r.Path+": "+where) }
		for _, s := range secrets {
			if s == "" {
				continue
			}
			for k, vs := range r.Header {
				for _, v := range vs {
					if strings.Contains(v, s) {
						at("header " + k)
					}
				}
			}
			if strings.Contains(r.Path, s) || strings.Contains(r.Query, s) {
				at("URL")
			}
			if bytes.Contains(r.Body, []byte(s)) {
				at("body")
			}
		}
	}
	return out
}
