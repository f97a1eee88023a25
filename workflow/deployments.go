package workflow

import (
	"fmt"
	"net/url"

	"go.yaml.in/yaml/v3"

	"github.com/jetpool/jetpool/provider"
)

// DeploymentsMax bounds a provider's deployments.
const DeploymentsMax = 16

// deployments reads a provider's deployments: list.
func (p *parser) deployments(name string, f field, kind string) []provider.Deployment {
	if f.val.Kind != yaml.SequenceNode || len(f.val.Content) == 0 {
		p.errorf(f.val.Line, f.path, "want a list of {base_url, api_key_env, limits}, got %s", describe(f.val))
		return nil
	}
	if len(f.val.Content) > DeploymentsMax {
		p.errorf(f.val.Line, f.path, "%d deployments: at most %d", len(f.val.Content), DeploymentsMax)
		return nil
	}
	if kind == provider.KindSim {
		p.errorf(f.key.Line, f.path, "not for kind sim")
		return nil
	}
	var out []provider.Deployment
	seen := map[string]int{}
	for i, n := range f.val.Content {
		path := fmt.Sprintf("%s[%d]", f.path, i)
		df, ok := p.fields(n, path, "name", "base_url", "api_key_env", "api_key_file", "limits")
		if !ok {
			continue
		}
		var d provider.Deployment
		line := deref(n).Line
		if v, ok := df["name"]; ok {
			if x, ok := p.str(v); ok {
				if providerNameRE().MatchString(x) {
					d.Name, line = x, v.val.Line
				} else {
					p.errorf(v.val.Line, v.path, "bad deployment name (want letters, digits, _, . and -)")
				}
			}
		}
		if v, ok := df["base_url"]; ok {
			if s, ok := p.str(v); ok {
				if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					p.errorf(v.val.Line, v.path, "want an http or https URL, got %q", s)
				} else {
					d.BaseURL = s
				}
			}
		}
		if v, ok := df["api_key_env"]; ok {
			if s, ok := p.str(v); ok {
				if envNameRE().MatchString(s) {
					d.APIKeyEnv = s
				} else {
					p.errorf(v.val.Line, v.path, "not an environment variable name (write the name of the variable that holds the key, never the key)")
				}
			}
		}
		if v, ok := df["api_key_file"]; ok {
			d.APIKeyFile, _ = p.str(v)
		}
		if v, ok := df["limits"]; ok {
			var l provider.Limits
			p.limits(v, &l) // limits.go
			d.Limits = &l
		}
		full := d.Name
		if full == "" {
			full = provider.DeploymentName(name, i)
		}
		if first, dup := seen[full]; dup {
			p.errorf(line, path, "deployment %s twice (first at line %d)", full, first)
		}
		if _, clash := p.entries[full]; clash || full == name {
			p.errorf(line, path, "deployment %s has a provider's name", full)
		}
		seen[full] = line
		out = append(out, d)
	}
	return out
}

// wireDeployment is a deployment in the encoded form.
type wireDeployment struct {
	Name       string      `json:"name,omitempty"`
	BaseURL    string      `json:"base_url,omitempty"`
	APIKeyEnv  string      `json:"api_key_env,omitempty"`
	APIKeyFile string      `json:"api_key_file,omitempty"`
	Limits     *wireLimits `json:"limits,omitempty"`
}

func encodeDeployments(ds []provider.Deployment) []wireDeployment {
	if len(ds) == 0 {
		return nil
	}
	out := make([]wireDeployment, len(ds))
	for i, d := range ds {
		out[i] = wireDeployment{Name: d.Name, BaseURL: d.BaseURL, APIKeyEnv: d.APIKeyEnv, APIKeyFile: d.APIKeyFile}
		if d.Limits != nil {
			out[i].Limits = encodeLimits(*d.Limits)
			if out[i].Limits == nil {
				out[i].Limits = &wireLimits{}
			}
		}
	}
	return out
}

// describeDeployments writes a provider's deployments for `jetpool
// validate`.
func describeDeployments(pr func(string, ...any), c provider.Config) {
	for _, d := range c.Endpoints() {
		if len(c.Deployments) == 0 {
			return
		}
		key := "no key"
		switch {
		case d.APIKeyFile != "":
			key = "key from file " + d.APIKeyFile
		case d.APIKeyEnv != "":
			key = "key from $" + d.APIKeyEnv
		}
		limits, _ := describeLimits(d)
		pr("    deployment %s: %s, %s, %s\n", d.Name, d.BaseURL, key, limits)
	}
}
