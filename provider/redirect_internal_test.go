package provider

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// The origin rule of checkRedirect on the URLs a loopback test cannot
// serve: HTTPS, default ports, IPv6, case, a downgrade to plain HTTP.
func TestCheckRedirectOrigin(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		from, to string
		method   string // of the next request; POST when empty
		want     string // "" followed, else a part of why
	}{
		{"https://api.anthropic.com/v1/messages", "https://api.anthropic.com:443/v1/messages/x", "", ""},
		{"https://API.Anthropic.com/v1/messages", "https://api.anthropic.com/v1/x", "", ""},
		{"http://10.0.0.5/v1", "http://10.0.0.5:80/v1/x", "", ""},
		{"https://api.openai.com/v1", "http://api.openai.com/v1", "", "it changes the scheme from https to http"},
		{"https://api.openai.com/v1", "https://api.openai.com:8443/v1", "", "another port"},
		{"https://api.openai.com/v1", "https://api.openai.com.evil.example/v1", "", "another host"},
		{"https://api.openai.com/v1", "https://evil.example/v1", http.MethodGet, "another host"},
		{"http://[::1]:8000/v1", "http://[::1]:8000/v1/x", "", ""},
		{"http://[::1]:8000/v1", "http://[::2]:8000/v1/x", "", "another host"},
		{"http://127.0.0.1:8000/v1", "http://[::1]:8000/v1/x", "", "another host"},
		{"https://generativelanguage.googleapis.com/v1beta", "https://generativelanguage.googleapis.com/v1beta/x?key=abc", "", ""},
		// A base_url's own userinfo, kept by a relative Location; another's is refused.
		{"https://u:p@proxy.example/v1", "https://u:p@proxy.example/v1/x", "", ""},
		{"https://u:p@proxy.example/v1", "https://u:other@proxy.example/v1/x", "", "credentials of its own"},
		{"https://proxy.example/v1", "https://u:p@proxy.example/v1/x", "", "credentials of its own"},
	} {
		from, err := url.Parse(tc.from)
		require.NoError(t, err)
		to, err := url.Parse(tc.to)
		require.NoError(t, err)
		method := tc.method
		if method == "" {
			method = http.MethodPost
		}
		err = checkRedirect(&http.Request{Method: method, URL: to}, []*http.Request{{Method: method, URL: from}})
		if tc.want == "" {
			require.NoError(t, err, "%s -> %s", tc.from, tc.to)
			continue
		}
		require.ErrorContains(t, err, tc.want, "%s -> %s", tc.from, tc.to)
	}
	// A secret in the Location's query is not repeated in the error.
	from, _ := url.Parse("https://api.openai.com/v1")
	to, _ := url.Parse("https://evil.example/collect?key=sk-leak-1")
	err := checkRedirect(&http.Request{Method: http.MethodPost, URL: to}, []*http.Request{{Method: http.MethodPost, URL: from}})
	require.ErrorContains(t, err, "to https://evil.example/collect?key=REDACTED: another host")
}
