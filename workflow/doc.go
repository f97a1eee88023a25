// Package workflow reads a jetpool workflow: the YAML file that names the
// providers and the pipeline of actions run for every record (docs/design.md §2).
//
// # Loading
//
// [Load] and [Parse] walk the YAML node tree, apply the defaults: block and the
// documented defaults, and validate everything at once. A bad workflow yields
// every problem, each an [*Error] that renders as
//
//	workflow.yaml:14: actions[1].retry.max_attempts: 12 is out of range 1-10
//
// joined with [errors.Join] and sorted by line; [Errors] unpacks them.
//
// # Inheritance
//
// An action takes each field it does not set from defaults:. Blocks (retry,
// expect, batch) are inherited whole: an action's own retry: block replaces
// the defaults' block rather than merging with it, so `retry: false` or
// `retry: {enabled: false}` opts one action out. params is the exception: it
// merges key by key, the action's keys winning, because sampling parameters
// are independent knobs (a default temperature and a per-action max_tokens).
//
// Retry is off unless a retry: block turns it on. Inside a block, enabled is
// true, max_attempts is [retry.MaxAttemptsDefault] and on_exhausted is
// [retry.ReturnLast] unless set; [retry.Policy.WithDefaults] fills the rest.
//
// Unknown fields are errors everywhere, except top-level fields named x-…,
// which are ignored so that they can hold YAML anchors for merge keys
// (<<: *common), as in Compose files.
//
// # Transport
//
// Workers read the workflow from the JETPOOL_JOBS KV bucket. [Workflow.Encode]
// writes the resolved workflow as JSON in the same vocabulary as the YAML
// (defaults applied, schema files inlined, only referenced providers), and
// [Decode] reads it back through the same parser and validator, so a worker
// never trusts a workflow that the dispatcher's version of jetpool would refuse.
//
// # Templates
//
// An action's prompt is a Go text/template executed with missingkey=error over
// the record's fields plus the outputs of earlier actions, keyed by action name.
// [Action.Fields] lists the top-level fields a prompt reads; [Action.Render]
// executes it. The template functions are listed in [TemplateFuncs].
package workflow
