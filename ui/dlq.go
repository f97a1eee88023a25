package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
)

// filterOf reads a dead-letter filter from query or form values, as the
// CLI's filter flags read it, and checks it as they do.
func filterOf(get func(string) string) (deadletter.Filter, error) {
	f := deadletter.Filter{Job: get("job"), Action: get("action"), Reason: get("reason"), Class: get("class"), Record: get("record")}
	if s := get("seq"); s != "" && s != "0" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return f, badf("seq %q: want a dead letter's sequence", s)
		}
		f.Seq = n
	}
	if s := get("since"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return f, badf("since %q: want a duration such as 30m or 2h", s)
		}
		f.Since = d
	}
	if s := get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return f, badf("limit %q: want a number (0: no limit)", s)
		}
		f.Limit = n
	}
	if err := f.Check(); err != nil {
		return f, badRequest{err}
	}
	return f, nil
}

// dlqView is a listing of dead letters.
type dlqView struct {
	Entries []deadLetter `json:"entries"`
	// Matched is how many match the filter (at least, with AtLeast).
	Matched int  `json:"matched"`
	AtLeast bool `json:"at_least,omitempty"`
	Shown   int  `json:"shown"`
}

// apiDLQ lists dead letters, oldest first, with the filters of `dlq list`
// (?job ?action ?reason ?class ?since ?limit); ?show= bounds how many come
// with their bodies (ListDefault), the rest are counted (up to CountMax).
func (h *Handler) apiDLQ(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	q := r.URL.Query()
	f, err := filterOf(q.Get)
	if err != nil {
		fail(w, err)
		return
	}
	_, show, err := paging("", q.Get("show"))
	if err != nil {
		fail(w, err)
		return
	}
	v := dlqView{Entries: []deadLetter{}}
	err = deadletter.Each(ctx, h.cfg.B, f, func(e *deadletter.Entry) error {
		if v.Matched >= CountMax {
			v.AtLeast = true
			return errEnough
		}
		v.Matched++
		if len(v.Entries) < show {
			v.Entries = append(v.Entries, newDeadLetter(e))
		}
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		fail(w, err)
		return
	}
	v.Shown = len(v.Entries)
	writeJSON(w, http.StatusOK, v)
}

// apiDeadLetter is one dead letter with its headers exactly as stored.
func (h *Handler) apiDeadLetter(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil {
		fail(w, badf("seq %q is not a number", r.PathValue("seq")))
		return
	}
	s, err := h.cfg.B.Stream(ctx, broker.StreamDLQ)
	if err != nil {
		fail(w, err)
		return
	}
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		fail(w, errGone(seq))
		return
	}
	if err != nil {
		fail(w, err)
		return
	}
	d := newDeadLetter(deadletter.FromMsg(m.Sequence, m.Subject, m.Header, m.Data))
	d.Subject, d.Headers = m.Subject, m.Header
	writeJSON(w, http.StatusOK, d)
}

// action is the body of a replay or purge: the filter, and for a replay
// its options.
type action struct {
	Job    string `json:"job"`
	Action string `json:"action"`
	Reason string `json:"reason"`
	Class  string `json:"class"`
	Since  string `json:"since"`
	Limit  int    `json:"limit"`
	Record string `json:"record"`
	Seq    uint64 `json:"seq"`
	Mode   string `json:"mode"` // replay only: "online"
}

func readAction(r *http.Request) (action, deadletter.Filter, error) {
	var a action
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		return a, deadletter.Filter{}, badf("request body: %v", err)
	}
	vals := map[string]string{"job": a.Job, "action": a.Action, "reason": a.Reason, "class": a.Class, "since": a.Since,
		"limit": strconv.Itoa(a.Limit), "record": a.Record, "seq": strconv.FormatUint(a.Seq, 10)}
	f, err := filterOf(func(k string) string { return vals[k] })
	return a, f, err
}

// replayView is what a replay did.
type replayView struct {
	Matched  int      `json:"matched"`
	Replayed int      `json:"replayed"`
	Skipped  []string `json:"skipped,omitempty"` // why each skipped one was
	Jobs     []string `json:"jobs"`
	Note     string   `json:"note,omitempty"`
	// Warnings name dead letters replayed to fail the same way (a context
	// overflow under a workflow with no overflow: block).
	Warnings []string `json:"warnings,omitempty"`
}

// apiReplay replays the dead letters matching the filter, as `jetpool
// retry` does (jetpool.Client.Retry: its checks first, then the replay).
func (h *Handler) apiReplay(w http.ResponseWriter, r *http.Request) {
	a, f, err := readAction(r)
	if err != nil {
		fail(w, err)
		return
	}
	h.replay(w, r, f, a.Mode)
}

// apiReplayOne replays the dead letter its path names, as `jetpool retry
// --seq SEQ` does; its body may ask {"mode": "online"}.
func (h *Handler) apiReplayOne(w http.ResponseWriter, r *http.Request) {
	seq, err := pathSeq(r)
	if err != nil {
		fail(w, err)
		return
	}
	var body struct {
		Mode string `json:"mode"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil && !errors.Is(err, io.EOF) {
		fail(w, badf("request body: %v", err))
		return
	}
	h.replay(w, r, deadletter.Filter{Seq: seq}, body.Mode)
}

// pathSeq reads the dead letter's sequence of the request's path.
func pathSeq(r *http.Request) (uint64, error) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		return 0, badf("seq %q is not a dead letter's sequence", r.PathValue("seq"))
	}
	return seq, nil
}

// errGone answers a request about one dead letter that is no longer there.
func errGone(seq uint64) error {
	return fmt.Errorf("%w: %d (replayed or purged?)", deadletter.ErrNotFound, seq)
}

// replay replays f's dead letters (Client.Retry) and answers what it did.
func (h *Handler) replay(w http.ResponseWriter, r *http.Request, f deadletter.Filter, mode string) {
	if mode != "" && mode != "online" {
		fail(w, badf("mode %q: only \"online\" is accepted", mode))
		return
	}
	// Not the request's context: a replay stopped half-way by a closed
	// tab would leave some records replayed and the page not knowing.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Minute)
	defer cancel()
	v := replayView{Jobs: []string{}}
	res, err := h.cfg.Client.Retry(ctx, jetpool.RetryParams{Filter: f, Mode: mode,
		Each: func(e *deadletter.Entry, replayed bool, why string) {
			if !replayed {
				v.Skipped = append(v.Skipped, fmt.Sprintf("%d %s/%s/%s: %s", e.Seq, e.Job, e.Action, e.Record, why))
			}
		}})
	if res != nil {
		for _, w := range res.Warnings {
			v.Warnings = append(v.Warnings, w.String())
		}
		if res.ReplayResult != nil {
			v.Matched, v.Replayed = res.Matched, res.Replayed
			for j := range res.Jobs {
				v.Jobs = append(v.Jobs, j)
			}
			sort.Strings(v.Jobs)
		}
	}
	h.cfg.Log.Info().Str("remote", r.RemoteAddr).Interface("filter", f).Int("replayed", v.Replayed).Err(err).Msg("dashboard: replay")
	switch {
	case errors.Is(err, jetpool.ErrInvalid):
		// Refused before anything changed (this process could not work
		// them, say): every dead letter is kept.
		writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error(), "replay": v})
		return
	case err != nil:
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": err.Error(), "replay": v})
		return
	case f.Seq > 0 && v.Matched == 0:
		fail(w, errGone(f.Seq))
		return
	}
	if v.Replayed > 0 {
		v.Note = h.afterReplay(ctx, v.Jobs)
	}
	writeJSON(w, http.StatusOK, v)
}

// afterReplay says who will work the replayed records: the Replayed hook
// (this process, when it hosts the embedded server), else the live
// workers, of which none may serve some jobs (`jetpool server --ui`, or a
// store another process hosts, with no worker).
func (h *Handler) afterReplay(ctx context.Context, jobs []string) string {
	if h.cfg.Replayed != nil {
		return h.cfg.Replayed(jobs)
	}
	unserved, err := h.cfg.Client.Unserved(ctx, jobs)
	switch {
	case err != nil:
		return fmt.Sprintf("the workers could not be asked (%v): start `jetpool worker` if none runs", err)
	case len(unserved) > 0:
		return fmt.Sprintf("no live worker serves %s: nothing runs them until you start `jetpool worker` (or run `jetpool retry --job JOB`, which works them)",
			strings.Join(unserved, ", "))
	}
	return "live workers serve them and will work them"
}

// apiPurge deletes the dead letters matching the filter for good, as
// `jetpool dlq purge` does (deadletter.Purge).
func (h *Handler) apiPurge(w http.ResponseWriter, r *http.Request) {
	_, f, err := readAction(r)
	if err != nil {
		fail(w, err)
		return
	}
	h.purge(w, r, f)
}

// apiPurgeOne deletes the dead letter its path names for good, as `jetpool
// dlq purge --seq SEQ` does.
func (h *Handler) apiPurgeOne(w http.ResponseWriter, r *http.Request) {
	seq, err := pathSeq(r)
	if err != nil {
		fail(w, err)
		return
	}
	h.purge(w, r, deadletter.Filter{Seq: seq})
}

// purge deletes f's dead letters (Client.PurgeDeadLetters) and answers how
// many; their records stay counted failed.
func (h *Handler) purge(w http.ResponseWriter, r *http.Request, f deadletter.Filter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Minute)
	defer cancel()
	n, err := h.cfg.Client.PurgeDeadLetters(ctx, f)
	h.cfg.Log.Info().Str("remote", r.RemoteAddr).Interface("filter", f).Int("purged", n).Err(err).Msg("dashboard: purge")
	switch {
	case err != nil:
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": err.Error(), "purged": n})
	case f.Seq > 0 && n == 0:
		fail(w, errGone(f.Seq))
	default:
		writeJSON(w, http.StatusOK, map[string]int{"purged": n})
	}
}
