package jetpool_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"slices"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/workflow"
)

// A workflow of one action on the built-in simulated provider, which
// answers "sim reply to: " and the prompt.
const greet = `
name: greet
providers:
  sim: {kind: sim}
defaults: {provider: sim, model: sim-1}
actions:
  - name: hello
    prompt: "Say hello to {{ .name }}"
`

// Run dispatches a job, works it in this process and summarizes it; its
// results come in input order with Sorted.
func ExampleClient_Run() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jetpool-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	c, err := jetpool.Open(ctx, dir, nil) // an embedded NATS server, its store in dir
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	wf, err := workflow.Parse("greet.yaml", []byte(greet))
	if err != nil {
		log.Fatal(err)
	}
	records := slices.Values([]any{
		map[string]any{"id": "1", "name": "Ada"},
		map[string]any{"id": "2", "name": "Grace"},
		map[string]any{"id": "3", "name": "Edsger"},
	})
	res, err := c.Run(ctx, wf, jetpool.DispatchParams{Records: records}, jetpool.WorkParams{})
	if err != nil {
		log.Fatal(err)
	}
	s := res.Summary
	fmt.Printf("%d records, %d succeeded, %d failed\n", s.Records, s.OK, s.Failed)

	for r, err := range c.Results(ctx, res.Summary.Job.ID, jetpool.ResultsParams{Sorted: true}) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s %q\n", r.ID, r.Status, r.Output)
	}
	// Output:
	// 3 records, 3 succeeded, 0 failed
	// 1 ok "sim reply to: Say hello to Ada"
	// 2 ok "sim reply to: Say hello to Grace"
	// 3 ok "sim reply to: Say hello to Edsger"
}

// Retry replays a job's dead letters under a fixed workflow, which becomes
// the job's next revision: the records that failed run it, those that
// succeeded keep their results.
func ExampleClient_Retry() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jetpool-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := jetpool.Open(ctx, dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Every call fails as an invalid key would: dead-lettered at once.
	broken, err := workflow.Parse("broken.yaml", []byte(`
name: greet
providers:
  sim: {kind: sim, sim: {fail_first: 100, fail_class: auth}}
defaults: {provider: sim, model: sim-1}
actions:
  - name: hello
    prompt: "Say hello to {{ .name }}"
`))
	if err != nil {
		log.Fatal(err)
	}
	records := slices.Values([]any{map[string]any{"id": "1", "name": "Ada"}, map[string]any{"id": "2", "name": "Grace"}})
	run, err := c.Run(ctx, broken, jetpool.DispatchParams{Records: records, NoPreflight: true}, jetpool.WorkParams{})
	if err != nil {
		log.Fatal(err)
	}
	job := run.Summary.Job.ID
	fmt.Printf("first run: %d failed %v\n", run.Summary.Failed, run.Summary.ByClass)
	var dead []string // in the order they failed: the workers run concurrently
	for e, err := range c.DeadLetters(ctx, deadletter.Filter{Job: job}) {
		if err != nil {
			log.Fatal(err)
		}
		dead = append(dead, fmt.Sprintf("%s %s %s", e.Record, e.Reason, e.Class))
	}
	slices.Sort(dead)
	fmt.Println("dead letters:", dead)

	fixed, err := workflow.Parse("fixed.yaml", []byte(greet))
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Retry(ctx, jetpool.RetryParams{Filter: deadletter.Filter{Job: job}, Workflow: fixed})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("replayed %d under revision %d\n", res.Replayed, res.Revision.Number)

	w, err := c.Work(ctx, job, jetpool.WorkParams{})
	if err != nil {
		log.Fatal(err)
	}
	s, err := c.Summarize(ctx, w.Job, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after the retry: %d succeeded, %d failed\n", s.OK, s.Failed)
	// Output:
	// first run: 2 failed map[auth:2]
	// dead letters: [1 permanent auth 2 permanent auth]
	// replayed 2 under revision 2
	// after the retry: 2 succeeded, 0 failed
}

// Status reads a job's progress as `jetpool status` shows it.
func ExampleClient_Status() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jetpool-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	c, err := jetpool.Open(ctx, dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	wf, err := workflow.Parse("greet.yaml", []byte(greet))
	if err != nil {
		log.Fatal(err)
	}
	d, err := c.Dispatch(ctx, wf, jetpool.DispatchParams{Records: slices.Values([]any{map[string]any{"id": "1", "name": "Ada"}})})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Work(ctx, d.Job.ID, jetpool.WorkParams{}); err != nil {
		log.Fatal(err)
	}
	st, err := c.Status(ctx, d.Job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(st.Status, st.Total, st.Succeeded, st.Failed)
	// Output: completed 1 1 0
}

// Connect reaches a NATS server of your own (here the one an Open client
// runs); workers elsewhere, `jetpool worker` processes, then work what it
// dispatches, and Wait follows them.
func ExampleConnect() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "jetpool-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	server, err := jetpool.Open(ctx, dir, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer server.Close()
	url := server.Broker().Server().ClientURL()

	c, err := jetpool.Connect(ctx, url, nil) // auth and TLS: Config.Broker (NATSCreds, NATSToken, TLS*)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("embedded:", c.Embedded())
	// Output: embedded: false
}
