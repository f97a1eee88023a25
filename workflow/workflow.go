package workflow

import (
	"sync"
	"text/template"
	"time"

	"github.com/jetpool/jetpool/pricing"
	"github.com/jetpool/jetpool/provider"
	"github.com/jetpool/jetpool/retry"
)

// Modes of an action.
const (
	ModeOnline  = "online" // one provider call per record, as records arrive (ModeDefault)
	ModeBatch   = "batch"  // the provider's batch API, about half the price
	ModeDefault = ModeOnline
)

// Kinds of action.
const (
	KindChat    = "chat"  // a model call per record: prompt in, answer out (KindDefault)
	KindEmbed   = "embed" // an embeddings call: input in, vector out (several records per request)
	KindDefault = KindChat
)

// Formats of an embed action's vectors in its results.
const (
	EmbedFormatFloat   = "float"  // a JSON list of numbers (EmbedFormatDefault)
	EmbedFormatBase64  = "base64" // base64 of little-endian float32: less than half the size
	EmbedFormatDefault = EmbedFormatFloat
)

// Defaults of EmbedConfig.
const (
	// EmbedBatchSizeDefault is the most records' inputs a worker puts in
	// one embeddings request; the provider's own limit caps it
	// (provider.EmbedMaxInputs).
	EmbedBatchSizeDefault = 64
	// EmbedMaxWaitDefault is how long the first input of a request waits
	// for others before the request goes.
	EmbedMaxWaitDefault = 20 * time.Millisecond
	// EmbedMaxWaitMax bounds max_wait: a worker slot waits that long.
	EmbedMaxWaitMax = 10 * time.Second
)

// Values of an action's cache: list: what ends a cacheable prefix.
const (
	CacheSystem    = "system"
	CacheTools     = "tools"
	CacheImages    = "images"
	CacheDocuments = "documents"
)

// Formats of an expect: block.
const (
	FormatJSON = "json" // the output must parse as JSON (and match Schema when set)
	FormatText = "text" // no check of the output; the same as no expect: block
)

// Defaults and bounds of BatchConfig, applied to actions in batch mode.
const (
	BatchMaxRecordsDefault = 1000
	BatchMaxRecordsMin     = 1
	// BatchMaxRecordsMax is OpenAI Batch's limit of requests per batch
	// (Anthropic's is higher); one workflow value must suit every provider.
	BatchMaxRecordsMax  = 50000
	BatchMaxWaitDefault = 30 * time.Second
	BatchPollDefault    = 30 * time.Second
)

// Defaults and bounds of an expect: block's repair: loop.
const (
	// RepairAttemptsDefault applies when a repair: block leaves out
	// max_attempts (or is `repair: true`). Without a repair: block there is
	// no repair: an output that fails the expectation fails the record.
	RepairAttemptsDefault = 2
	RepairAttemptsMin     = 0
	RepairAttemptsMax     = retry.MaxAttemptsMax
)

// Workflow is a parsed, validated workflow.
type Workflow struct {
	Name string // the optional name: field
	File string // the path the workflow was loaded from, as given
	// Providers holds every provider an action uses, keyed by name: entries
	// of providers: (layered over the preset of the same name, if any) and
	// presets used by name. Entries no action uses are validated but left out,
	// so that preflight never demands a key for an unused endpoint.
	Providers map[string]provider.Config
	Actions   []*Action
	// MaxCost (defaults: max_cost, in dollars; 0: no budget) stops the job's
	// new calls once its spend reaches it (worker/cost.go).
	MaxCost float64
	// Carry lists record fields copied into every result line (carry:).
	Carry []string
	// Priority (priority:, PriorityMin to PriorityMax; 0: PriorityDefault)
	// is the job's weight among the jobs a worker serves at once: it
	// divides its slots among them by weight. It is the job's first
	// priority only: `jetpool job priority` changes it while it runs.
	Priority int
	// Prices is the price file the actions' prices and context windows were
	// looked up in (prices:, else $JETPOOL_PRICES), as given; "" when none,
	// and always in a decoded workflow, whose actions carry what it said.
	Prices string
}

// A job's priority bounds (Workflow.Priority).
const (
	PriorityMin     = 1
	PriorityMax     = 1000
	PriorityDefault = 1
)

// Action is one step of the per-record pipeline, with defaults applied.
type Action struct {
	Name  string
	Index int // position in actions:, 0-based
	Line  int // line of the action in the workflow file

	Provider string // a key of Workflow.Providers
	Model    string // may be empty for kind sim
	System   string
	Prompt   string // a text/template; see Render
	// Params are sampling parameters merged from defaults: and the action.
	// Values are JSON types (float64, string, bool, []any, map[string]any)
	// after Parse exactly as after Decode, so code that reads them behaves
	// the same on the dispatcher and on a worker.
	Params map[string]any
	// Stream is the action's stream, else the defaults', else the provider's.
	Stream bool
	// JSON asks for the provider's JSON mode. It is never implied by expect:,
	// because some JSON modes reject prompts that do not mention JSON.
	JSON bool

	// Retry is the zero Policy (off: one call, one delivery) unless a retry:
	// block turned it on; then Policy.WithDefaults has been applied.
	Retry  retry.Policy
	Expect *Expect // nil when absent
	// MaxCalls caps the calls per record across retries, deliveries and
	// repairs; 0 means no cap beyond the retry layers'.
	MaxCalls int

	Mode     string      // ModeOnline or ModeBatch
	Batch    BatchConfig // set, defaults applied, when Mode is ModeBatch; zero otherwise
	Fallback string      // "" or ModeOnline (batch mode only): where a batch's stragglers go

	// OnTruncated is what an answer cut at max_tokens does: OnTruncatedFail,
	// OnTruncatedOK, OnTruncatedGrow, or OnTruncatedDefault ("").
	OnTruncated string
	// OnFiltered is what an answer stopped by a content filter does:
	// OnFilteredFail ("" too) or OnFilteredOK.
	OnFiltered string
	// Overflow is what a context overflow does (overflow:, overflow.go);
	// nil: the record is dead-lettered as context_overflow.
	Overflow *Overflow
	// Fallbacks are the provider/model pairs a record moves to, in order,
	// when this one cannot answer it (fallbacks:, fallbacks.go).
	Fallbacks []Fallback
	// Price bills the action's calls (price:, its provider's price:, the
	// price file's or the built-in table's); nil when unknown: its cost is
	// then not reported.
	Price *pricing.Price
	// ContextWindow is the most input tokens the model takes, as the price
	// file or the built-in table says (0: unknown): the overflow estimate's
	// window before any overflow has named one.
	ContextWindow int
	// Retires is the date the price file or table gives for the model's
	// shutdown ("" when none); not encoded: it is for `jetpool validate`.
	Retires string

	// Kind is KindChat, or KindEmbed: then Prompt is the input: template,
	// whose rendering is embedded, and Embed is set.
	Kind  string
	Embed EmbedConfig
	// Images and Documents are templates, each rendering to a URL, a data:
	// URL or a file path (read by the dispatcher into the record); one that
	// renders empty adds nothing (RenderParts).
	Images, Documents []string
	// Tools the model may call, and ToolChoice ("" or auto, none, required
	// or a tool's name). With tools, the output is {text, tool_calls}.
	Tools      []provider.Tool
	ToolChoice string
	// Cache lists what ends a cacheable prefix (CacheSystem, CacheTools,
	// CacheImages, CacheDocuments).
	Cache []string

	prompt *compiledPrompt // nil for an Action not built by Parse or Decode
	// parts are the compiled Images then Documents (nil as prompt is).
	parts []*compiledPrompt
}

// EmbedConfig tunes an embed action.
type EmbedConfig struct {
	BatchSize int           // records per request (EmbedBatchSizeDefault, at most the provider's limit)
	MaxWait   time.Duration // the wait for a request to fill (EmbedMaxWaitDefault)
	Format    string        // EmbedFormatFloat or EmbedFormatBase64
}

// IsEmbed reports whether a is an embed action.
func (a *Action) IsEmbed() bool { return a.Kind == KindEmbed }

// HasTools reports whether a's output is {text, tool_calls}.
func (a *Action) HasTools() bool { return len(a.Tools) > 0 }

// Expect is what an action's output must be.
type Expect struct {
	Format string         // FormatJSON or FormatText; a schema implies FormatJSON
	Schema map[string]any // JSON Schema, inlined even when written as a file path
	// SchemaFile is the path the schema was read from, as written in the
	// workflow (relative to the workflow file); "" when written inline.
	SchemaFile string
	SchemaLine int // line of schema: in the workflow file
	// RepairAttempts is how many repair calls may follow an output that fails
	// the expectation (0: none; RepairAttemptsDefault in a repair: block).
	RepairAttempts int
	// RepairOnExhausted is what happens when the repairs are spent
	// (retry.OnExhaustedDefault).
	RepairOnExhausted retry.OnExhausted
}

// BatchConfig tunes batch mode.
type BatchConfig struct {
	MaxRecords int           // records per batch (BatchMaxRecordsDefault)
	MaxWait    time.Duration // longest wait before a partial batch is sent (BatchMaxWaitDefault)
	Poll       time.Duration // how often a batch's status is polled (BatchPollDefault)
}

// SchemaCheck, when set, is called during validation with every expect:
// schema (after a schema file has been read); its error is reported at the
// schema's line. It is the hook for real JSON Schema validation.
var SchemaCheck func(schema map[string]any) error

// Action returns the action called name and its index, or nil and -1.
func (w *Workflow) Action(name string) (*Action, int) {
	for i, a := range w.Actions {
		if a.Name == name {
			return a, i
		}
	}
	return nil, -1
}

// compiledPrompt is an action's parsed template and the fields it reads.
type compiledPrompt struct {
	tmpl   *template.Template
	fields []string
	// renderers are copies of tmpl, one per concurrent render, each with
	// its bounded functions bound to a budget of its own (template_bounds.go).
	renderers sync.Pool
	refs      []Ref
	line      int // the line of the workflow file the template's first line is on (0: unknown)
	// plain is the template as text and top-level fields when it is no more
	// than that (plainParts), for a render without text/template.
	plain []plainPart
}
