package provider_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// Secrets a redirect must never carry off the endpoint: the key (each
// adapter's own header) and a configured header.
const (
	redirectKey    = "sk-redirect-KEY-7f3a9c"
	redirectHeader = "hdr-SECRET-51d2"
)

// redirectCall is one kind of request an adapter makes, and the body that
// answers it successfully.
type redirectCall struct {
	name string
	do   func(ctx context.Context, p provider.Provider) error
	ok   func(kind string) string
}

var redirectCalls = []redirectCall{
	{name: "call", do: func(ctx context.Context, p provider.Provider) error {
		_, err := p.Call(ctx, provider.Request{Model: "m", Messages: []provider.Message{{Role: "user", Content: "hi"}}})
		return err
	}, ok: func(kind string) string {
		switch kind {
		case provider.KindAnthropic:
			return providertest.AnthropicMessage("m", "fine", 1, 1)
		case provider.KindGemini:
			return providertest.GeminiResponse("m", "fine", 1, 1)
		}
		return providertest.OpenAIChat("m", "fine", 1, 1)
	}},
	{name: "stream", do: func(ctx context.Context, p provider.Provider) error {
		_, err := p.Call(ctx, provider.Request{Model: "m", Stream: true, Messages: []provider.Message{{Role: "user", Content: "hi"}}})
		return err
	}},
	{name: "embeddings", do: func(ctx context.Context, p provider.Provider) error {
		e, ok := p.(provider.Embedder)
		if !ok {
			return errNoEmbeddings
		}
		_, err := e.Embed(ctx, provider.EmbedRequest{Model: "m", Inputs: []string{"a"}})
		return err
	}},
	{name: "preflight", do: func(ctx context.Context, p provider.Provider) error {
		return p.Preflight(ctx, "m")
	}, ok: func(kind string) string {
		switch kind {
		case provider.KindAnthropic:
			return providertest.AnthropicModel("m")
		case provider.KindGemini:
			return providertest.GeminiModel("m")
		}
		return providertest.OpenAIModels("m")
	}},
}

var errNoEmbeddings = errors.New("no embeddings API")

// redirectConfig is a provider of kind at srv whose key is in a file (so
// the tests may run in parallel) and which sends a secret header too.
func redirectConfig(t *testing.T, kind string, srv *providertest.Server) provider.Config {
	t.Helper()
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(redirectKey), 0o600))
	cfg := providertest.Config(kind, srv)
	cfg.APIKeyFile = keyFile
	cfg.Headers = map[string]string{"X-Org-Secret": redirectHeader}
	return cfg
}

// requireRefused checks err is the permanent refusal of a redirect of
// status, saying why.
func requireRefused(t *testing.T, err error, status int, why string) {
	t.Helper()
	var re *retry.Error
	require.True(t, errors.As(err, &re), "want a *retry.Error, got %v", err)
	require.Equal(t, retry.ClassInvalidRequest, re.Class, "%v", err)
	require.Equal(t, provider.RedirectTypeName, re.TypeName, "%v", err)
	require.Equal(t, status, re.Status)
	require.Contains(t, re.Message, "refused a redirect")
	require.Contains(t, re.Message, why)
	require.False(t, retry.Retryable(re), "neither layer retries it")
	require.NotContains(t, re.Error(), redirectKey)
	require.NotContains(t, re.Error(), redirectHeader)
}

// A redirect never carries a key, or a configured header, off the endpoint
// it is bound to. For each wire format and each request an adapter makes
// (a call, a streamed call, embeddings, the preflight's listing), a
// redirect of every status to another host (127.0.0.2), another port,
// another name of this machine (localhost for 127.0.0.1), another scheme,
// a scheme-relative Location, or one with credentials in it fails the call
// permanently with why, and the other servers see nothing at all.
func TestRedirectOffTheEndpointIsRefused(t *testing.T) {
	t.Parallel()
	recorder := providertest.Reply{Status: 200, Body: providertest.OpenAIChat("m", "from elsewhere", 1, 1)}
	otherHost := providertest.NewServerAt(t, "127.0.0.2:0", recorder)
	otherPort := providertest.NewServerAt(t, "127.0.0.1:0", recorder)
	otherPortURL, err := url.Parse(otherPort.URL)
	require.NoError(t, err)

	t.Run("cases", func(t *testing.T) {
		for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini} {
			for _, call := range redirectCalls {
				for _, status := range []int{301, 302, 303, 307, 308} {
					targets := []struct{ name, to, why string }{
						{"another host", otherHost.URL + "/v1/x", "another host"},
						{"another port", otherPort.URL + "/v1/x", "another port"},
						{"another name", "http://localhost:" + otherPortURL.Port() + "/v1/x", "another host"},
						{"scheme-relative", "//" + strings.TrimPrefix(otherHost.URL, "http://") + "/v1/x", "another host"},
					}
					for _, tg := range targets {
						t.Run(fmt.Sprintf("%s/%s/%d/%s", kind, call.name, status, tg.name), func(t *testing.T) {
							t.Parallel()
							bound := providertest.NewServer(t, providertest.Redirect{Status: status, To: tg.to})
							p := providertest.New(t, redirectConfig(t, kind, bound))
							err := call.do(context.Background(), p)
							if errors.Is(err, errNoEmbeddings) {
								return // Anthropic has no embeddings API
							}
							requireRefused(t, err, status, tg.why)
							require.Contains(t, err.Error(), "from "+bound.URL+" to ")
							require.Len(t, bound.Requests(), 1, "the bound endpoint was asked once")
						})
					}
				}
			}
		}
	})
	require.Empty(t, otherHost.Requests(), "another host was sent nothing")
	require.Empty(t, otherPort.Requests(), "another port was sent nothing")
}

// Redirects that stay on the endpoint's host and port but are no good
// either: a change of scheme, credentials in the Location, a POST turned
// into a GET (301/302/303 drop the body), and an endless chain.
func TestRedirectWithinTheHostThatIsNoGood(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			t.Run("https", func(t *testing.T) {
				t.Parallel()
				bound := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					providertest.Redirect{Status: 307, To: "https://" + r.Host + r.URL.Path}.ServeHTTP(w, r)
				}))
				err := redirectCalls[0].do(context.Background(), providertest.New(t, redirectConfig(t, kind, bound)))
				requireRefused(t, err, 307, "it changes the scheme from http to https")
			})
			t.Run("credentials in the Location", func(t *testing.T) {
				t.Parallel()
				bound := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					providertest.Redirect{Status: 307, To: "http://user:pw-in-url@" + r.Host + "/v1/elsewhere"}.ServeHTTP(w, r)
				}))
				err := redirectCalls[0].do(context.Background(), providertest.New(t, redirectConfig(t, kind, bound)))
				requireRefused(t, err, 307, "the Location carries credentials of its own")
				require.NotContains(t, err.Error(), "pw-in-url", "the Location's password is not repeated")
				require.Len(t, bound.Requests(), 1)
			})
			for _, status := range []int{301, 302, 303} {
				t.Run(fmt.Sprintf("POST to GET by %d", status), func(t *testing.T) {
					t.Parallel()
					bound := providertest.NewServer(t, providertest.Redirect{Status: status, To: "/v1/moved"})
					err := redirectCalls[0].do(context.Background(), providertest.New(t, redirectConfig(t, kind, bound)))
					requireRefused(t, err, status, "it turns the POST into a GET without its body")
					require.Len(t, bound.Requests(), 1)
				})
			}
			t.Run("endless", func(t *testing.T) {
				t.Parallel()
				bound := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					providertest.Redirect{Status: 307, To: r.URL.Path + "/again"}.ServeHTTP(w, r)
				}))
				err := redirectCalls[0].do(context.Background(), providertest.New(t, redirectConfig(t, kind, bound)))
				requireRefused(t, err, 307, fmt.Sprintf("more than %d redirects", provider.MaxRedirects))
				require.Len(t, bound.Requests(), provider.MaxRedirects+1)
			})
		})
	}
}

// A redirect within the endpoint's own scheme, host and port that keeps
// the method is followed as before: a 307/308 of a call (its body sent
// again), any redirect of the preflight's GET.
func TestRedirectWithinTheEndpointIsFollowed(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic, provider.KindGemini} {
		for _, call := range []redirectCall{redirectCalls[0], redirectCalls[3]} {
			statuses := []int{307, 308}
			if call.name == "preflight" {
				statuses = []int{301, 302, 303, 307, 308}
			}
			for _, status := range statuses {
				t.Run(fmt.Sprintf("%s/%s/%d", kind, call.name, status), func(t *testing.T) {
					t.Parallel()
					ok := providertest.Reply{Status: 200, Body: call.ok(kind)}
					bound := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
						if strings.HasPrefix(r.URL.Path, "/moved/") {
							ok.ServeHTTP(w, r)
							return
						}
						// Relative to the request's path, as servers often write it.
						providertest.Redirect{Status: status, To: "/moved" + r.URL.Path}.ServeHTTP(w, r)
					}))
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					require.NoError(t, call.do(ctx, providertest.New(t, redirectConfig(t, kind, bound))))
					reqs := bound.Requests()
					require.Len(t, reqs, 2)
					require.Equal(t, reqs[0].Method, reqs[1].Method)
					require.Equal(t, reqs[0].Body, reqs[1].Body, "the body is sent again")
					require.NotEmpty(t, providertest.Leaks(reqs[1:], redirectKey), "the key goes with it: the same endpoint")
				})
			}
		}
	}
}
