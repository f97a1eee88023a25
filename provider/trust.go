package provider

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
)

// Trust is a worker operator's policy for the keys and endpoints a workflow
// may use (docs/design.md §9: workers own secrets and endpoints). A workflow
// names a provider's base_url and where its key is (api_key_env,
// api_key_file), but whoever writes a workflow is not whoever runs the
// worker: a worker sends a key only to a host its operator bound that key
// to, calls an endpoint without a key only on a host allowed for that
// (loopback by default: Ollama, vLLM on the same machine), and never reads a
// JETPOOL_ variable as a key, whatever the bindings say.
//
// The defaults bind each preset's key variable to its preset's host
// (OPENAI_API_KEY → api.openai.com, …) and SIM_API_KEY to the built-in sim;
// LoadTrust adds the operator's bindings from JETPOOL_KEY_HOSTS and sets the
// keyless hosts from JETPOOL_KEYLESS_HOSTS. A Trust is read-only once made
// and safe for concurrent use.
type Trust struct {
	keys    map[string][]hostRule // by keySource
	keyless []hostRule
}

// Environment variables of LoadTrust.
const (
	// EnvKeyHosts adds key bindings: entries separated by spaces or ";",
	// each SOURCE=HOST[,HOST…], where SOURCE is a variable name or the
	// absolute path of a key file, and HOST is a host name or address,
	// optionally with a port, "*.example.com" for its subdomains, an
	// http:// prefix to allow plain HTTP, or the word sim (the built-in
	// simulator).
	EnvKeyHosts = "JETPOOL_KEY_HOSTS"
	// EnvKeylessHosts replaces the hosts a provider without a key may call
	// (KeylessHostsDefault): HOSTs as in EnvKeyHosts, comma- or
	// space-separated; "none" allows none.
	EnvKeylessHosts = "JETPOOL_KEYLESS_HOSTS"
	// KeylessHostsDefault is the word for the loopback addresses
	// (localhost, 127.0.0.0/8, ::1), over HTTP or HTTPS, on any port.
	KeylessHostsDefault = "loopback"
	// SimKeyEnv is the key variable the sim provider may read by default.
	SimKeyEnv = "SIM_API_KEY"
)

// ErrUntrusted is matched (errors.Is) by every *UntrustedError.
var ErrUntrusted = errors.New("not allowed on this worker")

// UntrustedError is returned by Trust.Check for a provider that would send
// a key, or call an endpoint, that the worker's operator did not allow. It
// names the provider, the key's variable or file, and the host.
type UntrustedError struct {
	Provider string
	Source   string // "variable NAME", "file PATH", or "" for a keyless endpoint
	Host     string // the endpoint's host[:port], or "sim"
	Why      string
}

func (e *UntrustedError) Error() string {
	if e.Source == "" {
		return fmt.Sprintf("provider %s: %s", e.Provider, e.Why)
	}
	return fmt.Sprintf("provider %s: key %s %s", e.Provider, e.Source, e.Why)
}

// Is matches ErrUntrusted.
func (e *UntrustedError) Is(target error) bool { return target == ErrUntrusted }

// hostRule is one host a key may go to (or a keyless call may reach).
type hostRule struct {
	host     string // lower case; "*.example.com" matches its subdomains
	port     string // "" matches any port
	http     bool   // plain HTTP allowed
	loopback bool   // any loopback address
	sim      bool   // the built-in simulator (kind sim)
}

func (r hostRule) String() string {
	var s string
	switch {
	case r.sim:
		return "sim"
	case r.loopback:
		s = KeylessHostsDefault
	default:
		s = r.host
		if r.port != "" {
			s = net.JoinHostPort(r.host, r.port)
		}
	}
	if r.http && !r.loopback {
		s = "http://" + s
	}
	return s
}

// endpoint is where a provider's calls go.
type endpoint struct {
	sim        bool
	host, port string // port "" when the URL names none
	https      bool
}

func (e endpoint) String() string {
	if e.sim {
		return "sim"
	}
	if e.port != "" {
		return net.JoinHostPort(e.host, e.port)
	}
	return e.host
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r hostRule) matches(e endpoint) bool {
	if r.sim || e.sim {
		return r.sim && e.sim
	}
	if !e.https && !r.http && !isLoopback(e.host) {
		return false // a key in the clear off this machine needs an explicit http:// binding
	}
	if r.port != "" && r.port != cmp.Or(e.port, defaultPort(e.https)) {
		return false
	}
	switch {
	case r.loopback:
		return isLoopback(e.host)
	case strings.HasPrefix(r.host, "*."):
		return strings.HasSuffix(e.host, r.host[1:])
	}
	return r.host == e.host
}

func defaultPort(https bool) string {
	if https {
		return "443"
	}
	return "80"
}

// parseHost reads one HOST of EnvKeyHosts / EnvKeylessHosts.
func parseHost(s string) (hostRule, error) {
	var r hostRule
	rest := s
	if low := strings.ToLower(rest); strings.HasPrefix(low, "http://") {
		r.http, rest = true, rest[len("http://"):]
	} else if strings.HasPrefix(low, "https://") {
		rest = rest[len("https://"):]
	}
	rest = strings.TrimSuffix(rest, "/")
	switch strings.ToLower(rest) {
	case "":
		return r, fmt.Errorf("empty host in %q", s)
	case "sim":
		return hostRule{sim: true}, nil
	case KeylessHostsDefault:
		return hostRule{loopback: true, http: true}, nil
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		host, port = rest, ""
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	wild := strings.TrimPrefix(host, "*.")
	if wild == "" || strings.ContainsAny(wild, "/@?#*") {
		return r, fmt.Errorf("%q is not a host (want a name or address, optionally :port, *.domain or http://)", s)
	}
	r.host, r.port = host, port
	return r, nil
}

// keySource names where a provider's key comes from: its api_key_file when
// it has one (APIKey reads that first), else its api_key_env; "" when it
// has neither.
func keySource(c Config) string {
	switch {
	case c.APIKeyFile != "":
		return "file:" + filepath.Clean(c.APIKeyFile)
	case c.APIKeyEnv != "":
		return "env:" + c.APIKeyEnv
	}
	return ""
}

func describeSource(src string) string {
	if f, ok := strings.CutPrefix(src, "file:"); ok {
		return "file " + f
	}
	return "variable " + strings.TrimPrefix(src, "env:")
}

// endpointOf is where c's calls go: its base_url, or its kind's default.
func endpointOf(c Config) (endpoint, error) {
	if c.Kind == KindSim {
		return endpoint{sim: true}, nil
	}
	def := OpenAIBaseURLDefault
	switch c.Kind {
	case KindAnthropic:
		def = AnthropicBaseURLDefault
	case KindGemini:
		def = GeminiBaseURLDefault
	}
	u, err := url.Parse(cmp.Or(c.BaseURL, def))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return endpoint{}, fmt.Errorf("provider %s: base_url %q is not an http(s) URL", c.Name, redactURL(cmp.Or(c.BaseURL, def)))
	}
	return endpoint{host: strings.ToLower(u.Hostname()), port: u.Port(), https: u.Scheme == "https"}, nil
}

// DefaultTrust is the policy of a worker whose operator added nothing: each
// preset's key variable bound to its preset's host, SIM_API_KEY to the sim,
// and keyless calls to loopback only.
func DefaultTrust() *Trust {
	t := &Trust{keys: map[string][]hostRule{}, keyless: []hostRule{{loopback: true, http: true}}}
	for _, name := range PresetNames() {
		c := Presets[name]
		if c.APIKeyEnv == "" {
			continue
		}
		e, err := endpointOf(c)
		if err != nil {
			continue
		}
		t.add("env:"+c.APIKeyEnv, hostRule{host: e.host, port: e.port, http: !e.https})
	}
	t.add("env:"+SimKeyEnv, hostRule{sim: true})
	return t
}

func (t *Trust) add(src string, r hostRule) {
	if !slices.Contains(t.keys[src], r) {
		t.keys[src] = append(t.keys[src], r)
	}
}

// LoadTrust is DefaultTrust with the operator's additions from the
// environment (EnvKeyHosts, EnvKeylessHosts), read through lookup
// (os.LookupEnv). Its errors name the variable and the entry.
func LoadTrust(lookup func(string) (string, bool)) (*Trust, error) {
	t := DefaultTrust()
	if v, ok := lookup(EnvKeyHosts); ok {
		for entry := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ';' || r == ' ' || r == '\t' || r == '\n' }) {
			src, hosts, ok := strings.Cut(entry, "=")
			src = strings.TrimSpace(src)
			if !ok || src == "" || strings.TrimSpace(hosts) == "" {
				return nil, fmt.Errorf("%s: entry %q: want SOURCE=HOST[,HOST…] (a key variable or an absolute key file path, and where it may be sent)", EnvKeyHosts, entry)
			}
			var key string
			switch {
			case filepath.IsAbs(src):
				key = "file:" + filepath.Clean(src)
			case envNameOK(src):
				if strings.HasPrefix(src, "JETPOOL_") {
					return nil, fmt.Errorf("%s: entry %q: %s is jetpool's own configuration and is never sent as a provider key", EnvKeyHosts, entry, src)
				}
				key = "env:" + src
			default:
				return nil, fmt.Errorf("%s: entry %q: %q is neither a variable name nor an absolute file path", EnvKeyHosts, entry, src)
			}
			for h := range strings.SplitSeq(hosts, ",") {
				r, err := parseHost(strings.TrimSpace(h))
				if err != nil {
					return nil, fmt.Errorf("%s: entry %q: %w", EnvKeyHosts, entry, err)
				}
				if r.loopback {
					return nil, fmt.Errorf("%s: entry %q: name the loopback host and port a key may go to (e.g. 127.0.0.1:8000), not all of loopback", EnvKeyHosts, entry)
				}
				t.add(key, r)
			}
		}
	}
	if v, ok := lookup(EnvKeylessHosts); ok {
		t.keyless = nil
		if strings.TrimSpace(strings.ToLower(v)) != "none" {
			for h := range strings.FieldsFuncSeq(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
				r, err := parseHost(h)
				if err != nil {
					return nil, fmt.Errorf("%s: %w", EnvKeylessHosts, err)
				}
				t.keyless = append(t.keyless, r)
			}
		}
	}
	return t, nil
}

func envNameOK(s string) bool {
	for i, c := range s {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// Allowing returns a copy of t that also allows exactly what cfgs ask for:
// each provider's key to its own endpoint, and each keyless provider's
// endpoint. It is how `jetpool run` trusts the workflow file it was given
// (the user's own, on the user's machine) and nothing else; a JETPOOL_
// variable stays refused.
func (t *Trust) Allowing(cfgs map[string]Config) *Trust {
	n := &Trust{keys: make(map[string][]hostRule, len(t.keys)), keyless: slices.Clone(t.keyless)}
	for k, v := range t.keys {
		n.keys[k] = slices.Clone(v)
	}
	for _, name := range slices.Sorted(maps.Keys(cfgs)) {
		for _, c := range cfgs[name].Endpoints() { // each deployment's key and host
			e, err := endpointOf(c)
			if err != nil {
				continue // Check reports it
			}
			r := hostRule{host: e.host, port: cmp.Or(e.port, defaultPort(e.https)), http: !e.https, sim: e.sim}
			if src := keySource(c); src != "" {
				n.add(src, r)
			} else if !slices.Contains(n.keyless, r) {
				n.keyless = append(n.keyless, r)
			}
		}
	}
	return n
}

// Check returns nil when a worker under t may use c: its key goes only to a
// host the key is bound to, and an endpoint without a key is an allowed
// keyless host. Otherwise it returns an *UntrustedError saying why. It
// does not read the key (a missing key is APIKey's error). A provider with
// deployments is checked deployment by deployment.
func (t *Trust) Check(c Config) error {
	if len(c.Deployments) > 0 {
		for _, d := range c.Endpoints() {
			if err := t.Check(d); err != nil {
				return err
			}
		}
		return nil
	}
	e, err := endpointOf(c)
	if err != nil {
		return &UntrustedError{Provider: c.Name, Why: err.Error()}
	}
	src := keySource(c)
	if src == "" {
		if e.sim || slices.ContainsFunc(t.keyless, func(r hostRule) bool { return r.matches(e) }) {
			return nil
		}
		return &UntrustedError{Provider: c.Name, Host: e.String(), Why: fmt.Sprintf(
			"endpoint %s (no key) is not among this worker's keyless hosts (%s; set by %s)", e, rulesList(t.keyless), EnvKeylessHosts)}
	}
	ue := &UntrustedError{Provider: c.Name, Source: describeSource(src), Host: e.String()}
	if name, ok := strings.CutPrefix(src, "env:"); ok && strings.HasPrefix(name, "JETPOOL_") {
		ue.Why = fmt.Sprintf("is jetpool's own configuration, never sent as a provider key (not to %s, nor anywhere)", e)
		return ue
	}
	rules := t.keys[src]
	if slices.ContainsFunc(rules, func(r hostRule) bool { return r.matches(e) }) {
		return nil
	}
	if len(rules) == 0 {
		ue.Why = fmt.Sprintf("is bound to no host on this worker, so it is not sent to %s (keys are bound by the worker's operator, in %s)",
			e, EnvKeyHosts)
		return ue
	}
	if !e.sim && !e.https && !isLoopback(e.host) && slices.ContainsFunc(rules, func(r hostRule) bool { return r.matches(endpoint{host: e.host, port: e.port, https: true}) }) {
		ue.Why = fmt.Sprintf("may go to %s over HTTPS only, not in the clear to http://%s (an http:// binding in %s allows that)", e, e, EnvKeyHosts)
		return ue
	}
	ue.Why = fmt.Sprintf("may be sent to %s, not to %s (%s binds more hosts)", rulesList(rules), e, EnvKeyHosts)
	return ue
}

func rulesList(rs []hostRule) string {
	if len(rs) == 0 {
		return "none"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}
