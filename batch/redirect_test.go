package batch_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/jetpool/jetpool/batch"
	"github.com/jetpool/jetpool/batch/batchtest"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/provider/providertest"
	"github.com/jetpool/jetpool/retry"
)

// The batch APIs go through the adapters' HTTP client, so their redirects
// follow the online rule (provider.MaxRedirects): each step of a batch —
// the upload and creation, the status poll, the results download — that
// the provider's endpoint redirects to another host or port fails
// permanently, and the other server is sent nothing, neither the key nor
// a configured header.
func TestBatchRedirectOffTheEndpointIsRefused(t *testing.T) {
	t.Parallel()
	const key, header = "sk-batch-redirect-KEY-0e1d", "hdr-batch-SECRET-9a"
	recorder := providertest.Reply{Status: 200, Body: `{}`}
	others := map[string]*providertest.Server{
		"another host": providertest.NewServerAt(t, "127.0.0.2:0", recorder),
		"another port": providertest.NewServerAt(t, "127.0.0.1:0", recorder),
	}
	steps := []struct {
		name string
		// redirects reports whether the front redirects a request.
		redirects func(r *http.Request) bool
	}{
		{"submit", func(r *http.Request) bool { return r.Method == http.MethodPost }},
		{"status", func(r *http.Request) bool {
			return r.Method == http.MethodGet && !strings.HasSuffix(r.URL.Path, "/content") && !strings.HasSuffix(r.URL.Path, "/results")
		}},
		{"results", func(r *http.Request) bool {
			return strings.HasSuffix(r.URL.Path, "/content") || strings.HasSuffix(r.URL.Path, "/results")
		}},
	}
	t.Run("cases", func(t *testing.T) {
		for _, kind := range []string{provider.KindOpenAI, provider.KindAnthropic} {
			for _, step := range steps {
				for where, other := range others {
					t.Run(fmt.Sprintf("%s/%s/%s", kind, step.name, where), func(t *testing.T) {
						t.Parallel()
						fake := batchtest.New(t, kind)
						target, err := url.Parse(fake.URL)
						require.NoError(t, err)
						proxy := httputil.NewSingleHostReverseProxy(target)
						var redirected atomic.Int32
						front := providertest.NewServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
							if step.redirects(r) {
								redirected.Add(1)
								status := http.StatusFound
								if r.Method == http.MethodPost {
									status = http.StatusTemporaryRedirect
								}
								providertest.Redirect{Status: status, To: other.URL + r.URL.Path}.ServeHTTP(w, r)
								return
							}
							proxy.ServeHTTP(w, r)
						}))
						keyFile := filepath.Join(t.TempDir(), "key")
						require.NoError(t, os.WriteFile(keyFile, []byte(key), 0o600))
						cfg := fake.Config()
						cfg.BaseURL = front.URL + "/v1"
						cfg.APIKeyFile = keyFile
						cfg.Headers = map[string]string{"X-Org-Secret": header}
						c, err := batch.NewClient(cfg)
						require.NoError(t, err)

						err = runBatch(t, c)
						var re *retry.Error
						require.True(t, errors.As(err, &re), "want a *retry.Error, got %v", err)
						require.Equal(t, retry.ClassInvalidRequest, re.Class, "%v", err)
						require.Equal(t, provider.RedirectTypeName, re.TypeName)
						require.Contains(t, re.Message, where)
						require.EqualValues(t, 1, redirected.Load(), "the step was redirected once, and refused")
					})
				}
			}
		}
	})
	for where, other := range others {
		require.Empty(t, providertest.Leaks(other.Requests(), key, header), where)
		require.Empty(t, other.Requests(), "%s was sent nothing", where)
	}
}

// runBatch submits one line, polls until the batch ended and reads its
// results: the first error any step returns.
func runBatch(t *testing.T, c batch.Client) error {
	t.Helper()
	ctx := context.Background()
	id, err := c.Submit(ctx, "k", lines(t, c, "a"))
	if err != nil {
		return err
	}
	for range 100 { // the fake ends a batch after its Polls
		st, err := c.Status(ctx, id)
		if err != nil {
			return err
		}
		if st.Ended {
			return c.Results(ctx, st, func(batch.Entry) error { return nil })
		}
	}
	return errors.New("the batch did not end")
}
