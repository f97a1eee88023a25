package workflow

import (
	"cmp"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
)

// The providers: block: each provider entry, its sim: block, and which
// providers an action may use.

// entry is one provider of the providers: block.
type entry struct {
	cfg   provider.Config
	price *pricing.Price // price:, for every model of the provider
	bad   bool           // already reported; actions using it add no errors of their own
}

func (p *parser) providers(f field) {
	n := f.val
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, f.path, "want a mapping of provider names to entries, got %s", describe(n))
		return
	}
	for _, kv := range pairs(n) {
		name := kv[0].Value
		path := child(f.path, name)
		if _, dup := p.entries[name]; dup {
			p.errorf(kv[0].Line, path, "duplicate provider")
			continue
		}
		if !providerNameRE().MatchString(name) {
			p.errorf(kv[0].Line, path, "bad provider name (want letters, digits, _, . and -)")
		}
		p.entries[name] = p.provider(name, field{key: kv[0], val: deref(kv[1]), path: path})
	}
}

func (p *parser) provider(name string, f field) *entry {
	cfg, preset := provider.Preset(name)
	if !preset {
		cfg = provider.Config{Name: name}
	}
	e := &entry{cfg: cfg}
	before := len(p.errs)
	defer func() { e.bad = len(p.errs) > before }()
	pf, ok := p.fields(f.val, f.path, "kind", "base_url", "api_key_env", "api_key_file", "timeout", "headers", "stream", "stream_idle_timeout", "limits", "max_retry_after", "sim", "price", "deployments")
	if !ok {
		return e
	}
	if v, ok := pf["kind"]; ok {
		if k, ok := p.str(v); ok {
			if slices.Contains(provider.Kinds, k) {
				e.cfg.Kind = k
			} else {
				p.errorf(v.val.Line, v.path, "unknown kind %q (want %s)", k, orList(provider.Kinds))
			}
		}
	} else if !preset {
		p.errorf(f.val.Line, child(f.path, "kind"), "missing; want %s (or name the entry after a preset: %s)",
			orList(provider.Kinds), strings.Join(provider.PresetNames(), ", "))
	}
	if v, ok := pf["base_url"]; ok {
		if s, ok := p.str(v); ok {
			if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.errorf(v.val.Line, v.path, "want an http or https URL, got %q", s)
			} else {
				e.cfg.BaseURL = s
			}
		}
	}
	if v, ok := pf["api_key_env"]; ok {
		if s, ok := p.str(v); ok {
			if envNameRE().MatchString(s) {
				e.cfg.APIKeyEnv = s
			} else {
				// The value is not echoed: it may be the key itself.
				p.errorf(v.val.Line, v.path, "not an environment variable name (write the name of the variable that holds the key, such as GROQ_API_KEY, never the key)")
			}
		}
	}
	if v, ok := pf["api_key_file"]; ok {
		if s, ok := p.str(v); ok {
			// Read by the worker at call time, on its own machine: left as written.
			e.cfg.APIKeyFile = s
		}
	}
	if v, ok := pf["timeout"]; ok {
		e.cfg.Timeout, _ = p.duration(v)
	}
	if v, ok := pf["headers"]; ok {
		if h, ok := p.stringMap(v); ok {
			for k := range h {
				if slices.Contains(credentialHeaders, strings.ToLower(k)) {
					p.errorf(v.val.Line, child(v.path, k), "credentials may not be set as headers (headers are stored with the job); use api_key_env or api_key_file")
				}
			}
			if len(h) > 0 {
				e.cfg.Headers = h
			}
		}
	}
	if v, ok := pf["stream"]; ok {
		e.cfg.Stream, _ = p.boolean(v)
	}
	if v, ok := pf["stream_idle_timeout"]; ok {
		e.cfg.StreamIdleTimeout, _ = p.durationIn(v, StreamIdleTimeoutMin, StreamIdleTimeoutMax)
	}
	if v, ok := pf["limits"]; ok {
		p.limits(v, &e.cfg.Limits) // limits.go
	}
	if v, ok := pf["max_retry_after"]; ok {
		e.cfg.MaxRetryAfter, _ = p.durationIn(v, time.Second, MaxRetryAfterMax)
	}
	if v, ok := pf["price"]; ok {
		e.price, _ = p.price(v)
	}
	if v, ok := pf["deployments"]; ok {
		e.cfg.Deployments = p.deployments(name, v, e.cfg.Kind) // deployments.go
	}
	if v, ok := pf["sim"]; ok {
		if e.cfg.Kind != provider.KindSim {
			p.errorf(v.key.Line, v.path, "only for kind sim (this provider is kind %s)", cmp.Or(e.cfg.Kind, "unknown"))
		} else {
			e.cfg.Sim = p.sim(v)
		}
	}
	return e
}

var typeErrLineRE = lazyRegexp(`^line (\d+): (.*)$`)

// sim decodes a sim: block into provider.SimConfig, refusing unknown fields.
func (p *parser) sim(f field) *provider.SimConfig {
	var sc provider.SimConfig
	if f.val.Kind != yaml.MappingNode {
		p.errorf(f.val.Line, f.path, "want a mapping, got %s", describe(f.val))
		return nil
	}
	if !p.knownKeys(f.val, reflect.TypeFor[provider.SimConfig](), f.path) {
		return nil
	}
	if err := f.val.Decode(&sc); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, msg := range te.Errors {
				line := f.val.Line
				if m := typeErrLineRE().FindStringSubmatch(msg); m != nil {
					line, _ = strconv.Atoi(m[1])
					msg = m[2]
				}
				p.errorf(line, f.path, "%s", msg)
			}
		} else {
			p.errorf(f.val.Line, f.path, "%v", err)
		}
		return nil
	}
	if v, ok := any(&sc).(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			p.errorf(f.val.Line, f.path, "%v", err)
			return nil
		}
	}
	return &sc
}

// usable returns the configuration of a provider that exists and has no
// reported problem.
func (p *parser) usable(name string) (provider.Config, bool) {
	if e, ok := p.entries[name]; ok {
		return e.cfg, !e.bad
	}
	return provider.Preset(name)
}
