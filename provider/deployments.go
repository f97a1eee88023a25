package provider

import "strconv"

// Deployment is one of a provider's deployments: the same models behind
// another endpoint or key (a second key with its own rate limit, another
// region, Azure beside OpenAI). Each is paced by its own limits and has its
// own cooldown and circuit; calls are spread across them.
type Deployment struct {
	// Name is the deployment's name: DeploymentName's when empty. It names
	// its limiter, its metrics and its results.
	Name       string `json:"name,omitempty"`
	BaseURL    string `json:"base_url,omitempty"`    // the provider's when empty
	APIKeyEnv  string `json:"api_key_env,omitempty"` // the provider's when both are empty
	APIKeyFile string `json:"api_key_file,omitempty"`
	// Limits are the deployment's own; nil: the provider's, for each.
	Limits *Limits `json:"limits,omitempty"`
}

// DeploymentName is the name of a provider's deployment i (0-based) that
// names none: "openai-1", "openai-2", ….
func DeploymentName(providerName string, i int) string {
	return providerName + "-" + strconv.Itoa(i+1)
}

// Deployment is the configuration of c's deployment i: c with the
// deployment's name, endpoint, key and limits, no deployments, and Of
// naming c.
func (c Config) Deployment(i int) Config {
	d := c.Deployments[i]
	out := c
	out.Deployments = nil
	out.Name, out.Of = d.Name, c.Name
	if out.Name == "" {
		out.Name = DeploymentName(c.Name, i)
	}
	if d.BaseURL != "" {
		out.BaseURL = d.BaseURL
	}
	if d.APIKeyEnv != "" || d.APIKeyFile != "" {
		out.APIKeyEnv, out.APIKeyFile = d.APIKeyEnv, d.APIKeyFile
	}
	if d.Limits != nil {
		out.Limits = *d.Limits
	}
	return out
}

// Endpoints are the configurations c's calls go to: each deployment's, or
// c alone.
func (c Config) Endpoints() []Config {
	if len(c.Deployments) == 0 {
		return []Config{c}
	}
	out := make([]Config, len(c.Deployments))
	for i := range c.Deployments {
		out[i] = c.Deployment(i)
	}
	return out
}
