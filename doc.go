// Package jetpool runs batch jobs of model calls (LLM prompts over the
// records of a file) on workers fed by NATS JetStream, and is jetpool's
// one front door: the jetpool command and its dashboard are a few lines of
// flag parsing and printing over it, and a Go service can embed it or
// drive a deployment from it the same way.
//
// # Opening a client
//
// Open starts an embedded NATS server (JetStream, with its store in a
// directory) in the process; Connect connects to a server or cluster of
// your own. Both take a *Config whose zero value is usable: Config.Broker
// carries auth, TLS, replicas and stream limits, with the defaults of
// BrokerDefaults.
//
//	c, err := jetpool.Open(ctx, ".jetpool", nil)
//	// or: c, err := jetpool.Connect(ctx, "nats://nats:4222", &jetpool.Config{
//	//	Broker: broker.Config{NATSCreds: "/etc/jetpool/user.creds"}})
//	defer c.Close()
//
// # Workflows
//
// A workflow (docs/workflow.md) names the providers, their limits and
// prices, and the actions each record goes through: a prompt template, a
// model, a retry policy, an expected output. LoadWorkflow reads and checks
// one from a file (workflow.Parse reads one from bytes).
//
// # Running a job
//
// Run is `jetpool run`: it dispatches the workflow over the records,
// works the job in this process until every record has a final result,
// and returns a Summary (records ok and failed, by class and reason;
// calls, tokens, cost). The records come from a file (DispatchParams.Input:
// JSONL, CSV or Parquet) or from an iterator (DispatchParams.Records).
// Run again with the same workflow and input, it resumes the job: records
// that succeeded are not paid for again; an edited input runs only its new
// and changed records.
//
//	res, err := c.Run(ctx, wf, jetpool.DispatchParams{Input: "records.jsonl"}, jetpool.WorkParams{})
//	fmt.Println(res.Summary.OK, res.Summary.Failed)
//
// To split the two, Dispatch publishes the job and returns; Work runs
// workers in this process on one job until it is done; Wait waits for
// workers elsewhere (`jetpool worker` processes) to finish it.
//
// # Status and results
//
// Status reads a job's progress (queued, in flight, succeeded, failed,
// dead letters by reason, cost against its budget); Statuses reads every
// job's, and Workers what the live workers say. Results is an iterator
// (iter.Seq2) over the job's final results, one per record, as stored or
// in input order (ResultsParams.Sorted, an external sort whose memory
// stays flat). Summarize counts them and can write them as JSONL.
//
//	for r, err := range c.Results(ctx, jobID, jetpool.ResultsParams{Sorted: true}) { ... }
//
// # Failures and retries
//
// A record that fails for good is dead-lettered with its story (reason,
// error class, attempts, the record): package deadletter lists them.
// Retry replays the dead letters a deadletter.Filter selects, with the
// checks `jetpool retry` makes first: with RetryParams.Workflow the fixed
// workflow becomes the job's next revision (the actions that failed, and
// those after them, run it; the others keep their results); without one,
// RetryResult.Warnings names context overflows that would fail again; on
// an embedded store it checks that this process could work them. Work (or
// Wait) then takes each of RetryResult.Jobs to its end; on a store another
// process hosts, RetryResult.Unserved names the jobs no live worker serves,
// which nobody runs until Work does. PurgeDeadLetters deletes dead letters
// (Filter.Seq: one); their records stay counted failed.
//
// # Steering
//
// Cancel stops a job (no worker starts a call of it once Cancel returns
// nil), Pause and Resume hold and release its records, SetPriority
// weighs it among the running jobs (package steer).
//
// # Budgets
//
// DispatchParams.MaxCost (or the workflow's max_cost) caps what a job
// spends: each call's worst case is set aside before it is sent. A job
// that reached its budget fails; RetryParams.MaxCost (RaiseBudget) raises
// it and replays the records it stopped.
//
// # Tracing
//
// The Client's calls trace each record (package tracing, docs/tracing.md)
// once tracing is on: tracing.Setup turns it on from the standard OTEL_
// variables, as the CLI does; tracing.Use hands it a tracer provider of
// your own (OpenTelemetry's global provider is not read).
//
// # Errors
//
// An error that refuses a request before anything changed (a bad line of
// the input, naming file, line and field; a workflow that does not check;
// a key the process may not send; several jobs an input could go to) is
// ErrInvalid (errors.Is). broker.ErrJobNotFound is an unknown job id.
//
// The command line, its environment and its exit codes are in README.md;
// docs/api.md is this package's overview.
package jetpool
