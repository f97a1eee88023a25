// Command riverab is River's side of bench/ab/river.sh, and the watcher that
// tells that script when jetpool's worker has stored every result. It is a
// module of its own so that jetpool's go.mod gains no dependency on River or
// pgx, and `go test ./...` at the root does not build it.
//
//	riverab migrate -dsn DSN                      River's schema (rivermigrate, up)
//	riverab enqueue -dsn DSN -input FILE [-batch 1000]
//	                                              one job a line of FILE, InsertMany in batches
//	riverab drain -dsn DSN -n N [-workers 256] [-fetch-cooldown D]
//	                                              work until N jobs are completed, then stop
//	riverab watch -url URL -n N [-user U -password P]
//	                                              exit once JETPOOL_RESULTS holds N messages;
//	                                              a pause of 1 s or more in them is said on stderr
//
// Each is timed from outside, as a process (/usr/bin/time in river.sh).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

// Record is one line of the input: the same JSONL jetpool dispatches.
type Record struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// Kind names the job kind in River.
func (Record) Kind() string { return "record" }

// nopWorker completes every job at once: River records the completion in
// Postgres, which is what a drain measures.
type nopWorker struct {
	river.WorkerDefaults[Record]
}

func (nopWorker) Work(context.Context, *river.Job[Record]) error { return nil }

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: riverab migrate|enqueue|drain|watch [flags]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	dsn := fs.String("dsn", "", "Postgres connection string")
	input := fs.String("input", "", "JSONL file: one job a line (enqueue)")
	batch := fs.Int("batch", 1000, "jobs an InsertMany call (enqueue)")
	n := fs.Int("n", 0, "jobs (drain) or results (watch) to wait for")
	workers := fs.Int("workers", 256, "MaxWorkers of the default queue (drain)")
	cooldown := fs.Duration("fetch-cooldown", 0, "River's FetchCooldown (drain; 0: River's default, 100ms)")
	url := fs.String("url", "", "NATS URL (watch)")
	user := fs.String("user", "", "NATS user (watch)")
	password := fs.String("password", "", "NATS password (watch)")
	_ = fs.Parse(os.Args[2:])

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var err error
	switch os.Args[1] {
	case "migrate":
		err = migrate(ctx, *dsn)
	case "enqueue":
		err = enqueue(ctx, *dsn, *input, *batch)
	case "drain":
		err = drain(ctx, *dsn, *n, *workers, *cooldown)
	case "watch":
		err = watch(ctx, *url, *user, *password, *n)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "riverab "+os.Args[1]+":", err)
		os.Exit(1)
	}
}

func migrate(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// enqueue inserts one job a line of the input, batch jobs an InsertMany
// (each call is one transaction: one commit, one WAL flush).
func enqueue(ctx context.Context, dsn, input string, batch int) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	f, err := os.Open(input)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	params := make([]river.InsertManyParams, 0, batch)
	flush := func() error {
		if len(params) == 0 {
			return nil
		}
		_, err := client.InsertMany(ctx, params)
		params = params[:0]
		return err
	}
	line, total := 0, 0
	for sc.Scan() {
		line++
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return fmt.Errorf("%s:%d: %w", input, line, err)
		}
		params = append(params, river.InsertManyParams{Args: r})
		total++
		if len(params) == batch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", input, err)
	}
	if err := flush(); err != nil {
		return err
	}
	fmt.Println("enqueued", total)
	return nil
}

// drain runs a client until n jobs are completed, counted from River's own
// completion events (sent once the completer has written them), then checks
// the count in the table and stops.
func drain(ctx context.Context, dsn string, n, maxWorkers int, cooldown time.Duration) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	workers := river.NewWorkers()
	river.AddWorker(workers, nopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown: cooldown,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}},
		Workers:       workers,
	})
	if err != nil {
		return err
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: n + 1000, // never full: a full channel drops events
		Kinds:    []river.EventKind{river.EventKindJobCompleted},
	})
	defer unsubscribe()
	if err := client.Start(ctx); err != nil {
		return err
	}
	for done := 0; done < n; {
		select {
		case <-events:
			done++
		case <-ctx.Done():
			return fmt.Errorf("%d of %d completed: %w", done, n, ctx.Err())
		}
	}
	if err := client.Stop(ctx); err != nil {
		return err
	}
	var completed int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&completed); err != nil {
		return err
	}
	if completed < n {
		return fmt.Errorf("%d jobs completed in the table, %d events", completed, n)
	}
	fmt.Println("completed", completed)
	return nil
}

// watch polls the results stream's message count until it reaches n: one
// connection, a stream info every 20 ms, far cheaper than a `jetpool status`
// process each time.
func watch(ctx context.Context, url, user, password string, n int) error {
	opts := []nats.Option{}
	if user != "" {
		opts = append(opts, nats.UserInfo(user, password))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	start, last, lastAt := time.Now(), uint64(0), time.Now()
	for {
		info, err := js.Stream(ctx, "JETPOOL_RESULTS")
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if err == nil {
			msgs := info.CachedInfo().State.Msgs
			// A pause of a second or more in the results, said on stderr: a
			// drain's wall time then is a wait, not work.
			if gap := time.Since(lastAt); msgs != last && gap >= time.Second && last > 0 {
				fmt.Fprintf(os.Stderr, "no new result for %.1f s, at %d of %d (%.1f s from the start)\n",
					gap.Seconds(), last, n, lastAt.Sub(start).Seconds())
			}
			if msgs != last {
				last, lastAt = msgs, time.Now()
			}
			if msgs >= uint64(n) {
				fmt.Println("results", msgs)
				return nil
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
