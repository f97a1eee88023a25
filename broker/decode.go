package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"sync"
)

// decodeAhead bounds the results read and not yet handed to the caller of
// EachResult: what an export holds beyond the one it writes.
const decodeAhead = 1024

// orderedDecoder decodes results on every core beside the read, and hands
// them to the caller's fn one at a time, in the order they were read, on
// the caller's own goroutine (so that fn may stop it with t.FailNow or a
// panic like any callback). encoding/json's Unmarshal was the most of the
// CPU of `jetpool results` of a large job, done on the read's goroutine
// with the second core mostly idle.
//
// The read calls add for each message and finish at its end; the caller
// calls each, then drain whatever each returned.
type orderedDecoder struct {
	work  chan *decoding
	order chan *decoding
	wg    sync.WaitGroup // the decoders
}

type decoding struct {
	subject string
	data    []byte
	r       Result
	err     error
	ready   chan struct{}
}

func newOrderedDecoder() *orderedDecoder {
	d := &orderedDecoder{work: make(chan *decoding, decodeAhead), order: make(chan *decoding, decodeAhead)}
	for range max(1, runtime.GOMAXPROCS(0)) {
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			for it := range d.work {
				if err := json.Unmarshal(it.data, &it.r); err != nil {
					it.err = fmt.Errorf("result %s: %w", it.subject, err)
				}
				close(it.ready)
			}
		}()
	}
	return d
}

// add queues one message's result, waiting while decodeAhead are queued;
// only ctx's end stops it.
func (d *orderedDecoder) add(ctx context.Context, subject string, data []byte) error {
	it := &decoding{subject: subject, data: data, ready: make(chan struct{})}
	select {
	case d.order <- it:
	case <-ctx.Done():
		return ctx.Err()
	}
	d.work <- it // never waits long: the decoders take every item, and work is as deep as order
	return nil
}

// finish ends the queue: the read has added everything it will.
func (d *orderedDecoder) finish() {
	close(d.work)
	close(d.order)
}

// each hands every queued result to fn in read order until the queue is
// finished; the first failure (a result that does not decode, or fn's
// error) ends it.
func (d *orderedDecoder) each(fn func(*Result) error) error {
	for it := range d.order {
		<-it.ready
		if it.err != nil {
			return it.err
		}
		if err := fn(&it.r); err != nil {
			return err
		}
	}
	return nil
}

// drain waits, once the read has been told to stop, for its end and for
// the decoders, discarding what is left.
func (d *orderedDecoder) drain() {
	for range d.order {
	}
	d.wg.Wait()
}
