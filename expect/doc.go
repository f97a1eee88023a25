// Package expect checks a model's output against an action's expect: block
// (docs/design.md §2): it finds the JSON value in what a model really
// returns, validates it with a JSON Schema (draft 2020-12 unless the schema
// names another), and, when the output falls short, says why in words fit
// both for a diagnostic and for the correction message of a repair.
//
// The package is pure policy: it imports no NATS, no HTTP and neither
// workflow nor worker, so that workflow can use it to refuse an invalid
// schema at validation time (workflow.SchemaCheck) and the worker can use it
// in its repair loop.
//
// # Extraction
//
// Models wrap JSON in prose and code fences. Extract accepts, in order:
// the whole text as one JSON value; the body of a ```json (or bare ```)
// fence; the first object or array that starts anywhere in the text, with
// whatever follows it ignored. An object cut off because the model hit its
// token limit (finish reason "length") is reported as such
// (CauseTruncated), so that neither a human nor a repair prompt mistakes it
// for a formatting error.
//
// # Violations
//
// Every way the output can fall short is a *Violation: no JSON at all,
// invalid JSON, truncated output, or schema errors, each schema error a
// Problem with the instance path (a JSON pointer, "(root)" for the whole
// value) and the validator's reason. Violation.Error is the one-line
// diagnostic; Violation.Correction is the user message a repair sends back
// to the model.
//
// # Schema checks
//
// CheckSchema compiles a schema without validating anything, for
// `jetpool validate`. Formats ("date", "email", …) are asserted, not just
// annotated: a model that writes "yesterday" for a date should be repaired.
// References must resolve inside the schema ($defs); external $ref is
// refused rather than fetched, so a workflow can never make a worker read a
// file or the network.
package expect
