package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
)

// Cookie and header names.
const (
	sessionCookie = "jetpool_ui_session"
	csrfCookie    = "jetpool_ui_csrf"
	// CSRFHeader carries the page's CSRF token on every POST to /api/.
	CSRFHeader = "X-Jetpool-CSRF"
)

// sessionValue is the session cookie of a token: a MAC of it, so the token
// itself is never stored in the browser.
func sessionValue(token string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("jetpool ui session"))
	return hex.EncodeToString(m.Sum(nil))
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// signedIn reports whether r carries the token: the session cookie, or
// Authorization: Bearer TOKEN (scripts). Always true without a token.
func (h *Handler) signedIn(r *http.Request) bool {
	if h.cfg.Token == "" {
		return true
	}
	if c, err := r.Cookie(sessionCookie); err == nil && equal(c.Value, h.session) {
		return true
	}
	bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && equal(bearer, h.cfg.Token)
}

// authed refuses requests without the token: the API with 401, pages with
// a redirect to the login form.
func (h *Handler) authed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.signedIn(r) {
			next.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/api/") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="jetpool"`)
			writeError(w, http.StatusUnauthorized, fmt.Errorf("sign in: this dashboard needs its token (%s)", TokenEnv))
			return
		}
		seeOther(w, "login")
	})
}

// seeOther redirects to loc relative to the request's URL as the browser
// sees it (http.Redirect would resolve it against the path after a
// http.StripPrefix, losing the prefix the dashboard is mounted under).
func seeOther(w http.ResponseWriter, loc string) {
	w.Header().Set("Location", loc)
	w.WriteHeader(http.StatusSeeOther)
}

// Errors of mutating requests.
var (
	// ErrReadOnly is returned for a mutating request to a read-only dashboard.
	ErrReadOnly = errors.New("the dashboard is read-only (--read-only): replay, purge, cancel and pause are refused")
	// ErrCSRF is returned for a mutating request without the page's CSRF token.
	ErrCSRF = errors.New("missing or wrong CSRF token: reload the page and try again")
)

// mutating guards a state-changing API call: refused when read-only, and
// unless the request carries the CSRF token of its cookie (double submit:
// another site can make the browser send the cookie, but cannot read it to
// send it back in a header).
func (h *Handler) mutating(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.ReadOnly {
			writeError(w, http.StatusForbidden, ErrReadOnly)
			return
		}
		c, err := r.Cookie(csrfCookie)
		if err != nil || len(c.Value) < 32 || !equal(c.Value, r.Header.Get(CSRFHeader)) {
			writeError(w, http.StatusForbidden, ErrCSRF)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		next(w, r)
	})
}

// csrfToken returns the request's CSRF token, setting a new cookie when it
// has none.
func csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) >= 32 {
		return c.Value
	}
	v := randomHex(32)
	http.SetCookie(w, &http.Cookie{Name: csrfCookie, Value: v, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	return v
}

// secure reports whether the browser reached us over TLS (directly, or
// through a proxy that says so): cookies are then marked Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

var loginTmpl = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>jetpool · sign in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="static/app.css"></head>
<body class="login"><form method="post" action="login">
<h1>jetpool</h1>
<p>This dashboard needs its token (<code>{{.Env}}</code>).</p>
{{if .Wrong}}<p class="error">That is not the token.</p>{{end}}
<label>Token <input type="password" name="token" autocomplete="current-password" autofocus required></label>
<button type="submit">Sign in</button>
</form></body></html>
`))

func (h *Handler) loginPage() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if h.cfg.Token == "" || h.signedIn(r) {
			seeOther(w, "./")
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginTmpl.Execute(w, map[string]any{"Env": TokenEnv, "Wrong": r.URL.Query().Has("wrong")})
	}
}

// login checks the form's token and sets the session cookie. A
// cross-site POST is refused by the cross-origin protection before it gets
// here.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.cfg.Token == "" {
		seeOther(w, "./")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if !equal(r.PostFormValue("token"), h.cfg.Token) {
		h.cfg.Log.Warn().Str("remote", r.RemoteAddr).Msg("dashboard: sign-in with a wrong token")
		seeOther(w, "login?wrong")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: h.session, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	seeOther(w, "./")
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
	seeOther(w, "login")
}
