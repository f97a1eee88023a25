package ui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/deadletter"
	"github.com/jetpool/jetpool/ratelimit"
	"github.com/jetpool/jetpool/retry"
)

// Bounds of the API's answers.
const (
	// ListDefault and ListMax bound a page of results or dead letters.
	ListDefault = 100
	ListMax     = broker.BrowseMax
	// CountMax bounds how many dead letters a listing counts: past it the
	// page says "at least CountMax".
	CountMax = 10_000
	// requestTimeout bounds the reads of one API request.
	requestTimeout = 15 * time.Second
)

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// badRequest is an error in what the request asked for (400).
type badRequest struct{ err error }

func (e badRequest) Error() string { return e.err.Error() }
func (e badRequest) Unwrap() error { return e.err }

func badf(format string, args ...any) error { return badRequest{fmt.Errorf(format, args...)} }

// fail answers err with the status it deserves.
func fail(w http.ResponseWriter, err error) {
	var br badRequest
	switch {
	case errors.As(err, &br):
		writeError(w, http.StatusBadRequest, err)
	case errors.Is(err, broker.ErrJobNotFound), errors.Is(err, deadletter.ErrNotFound):
		writeError(w, http.StatusNotFound, err)
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, err)
	default:
		writeError(w, http.StatusBadGateway, err)
	}
}

func reqCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), requestTimeout)
}

func (h *Handler) index(files fs.FS) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		csrfToken(w, r) // the page's first request sets the cookie
		w.Header().Set("Cache-Control", "no-store")
		http.ServeFileFS(w, r, files, "index.html")
	})
}

// session is what the page needs to know about the dashboard.
type session struct {
	ReadOnly bool   `json:"read_only"`
	CSRF     string `json:"csrf"`
	PollMS   int64  `json:"poll_ms"`
	SignedIn bool   `json:"signed_in"` // a token is set (and was given)
	Embedded bool   `json:"embedded"`  // the broker runs the embedded server
	// Reasons and Classes are the values of the dead-letter filters.
	Reasons []retry.Reason `json:"reasons"`
	Classes []retry.Class  `json:"classes"`
}

func (h *Handler) apiSession(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, session{ReadOnly: h.cfg.ReadOnly, CSRF: csrfToken(w, r), PollMS: h.cfg.Poll.Milliseconds(),
		SignedIn: h.cfg.Token != "", Embedded: h.cfg.B.Embedded(), Reasons: retry.Reasons, Classes: retry.Classes})
}

// jobsView is the jobs page.
type jobsView struct {
	Jobs    []jetpool.JobStatus `json:"jobs"`
	Workers int                 `json:"workers"`
	Now     time.Time           `json:"now"`
}

func (h *Handler) apiJobs(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	jobs, err := h.cfg.B.ListJobs(ctx)
	if err != nil {
		fail(w, err)
		return
	}
	sort.Slice(jobs, func(i, k int) bool { return jobs[i].Created.After(jobs[k].Created) }) // newest first
	out, stats, err := h.cfg.Client.Statuses(ctx, jobs, false)
	if err != nil {
		fail(w, err)
		return
	}
	now := time.Now()
	for i := range out {
		if h.hist.active(&out[i]) {
			h.hist.add(&out[i], nil, now)
		}
	}
	writeJSON(w, http.StatusOK, jobsView{Jobs: out, Workers: len(stats), Now: now.UTC()})
}

// jobView is a job's page.
type jobView struct {
	Status  jetpool.JobStatus     `json:"status"`
	Actions []broker.ActionCounts `json:"actions"`
	Dead    deadCounts            `json:"dead_letters"`
	Job     map[string]any        `json:"job"` // the job's entry, workflow aside
	Now     time.Time             `json:"now"`
}

// deadCounts are a job's dead letters by error class and by reason.
type deadCounts struct {
	Total   int            `json:"total"`
	AtLeast bool           `json:"at_least,omitempty"` // counting stopped at CountMax
	ByClass map[string]int `json:"by_class"`
	Reasons map[string]int `json:"by_reason"`
}

func (h *Handler) apiJob(ctx context.Context, w http.ResponseWriter, r *http.Request, j *broker.Job) {
	st, _, err := h.cfg.Client.Statuses(ctx, []*broker.Job{j}, true)
	if err != nil {
		fail(w, err)
		return
	}
	acts, err := h.cfg.B.JobActionCounts(ctx, j)
	if err != nil {
		fail(w, err)
		return
	}
	dead := deadCounts{ByClass: map[string]int{}, Reasons: map[string]int{}}
	err = deadletter.Each(ctx, h.cfg.B, deadletter.Filter{Job: j.ID}, func(e *deadletter.Entry) error {
		if dead.Total >= CountMax {
			dead.AtLeast = true
			return errEnough
		}
		dead.Total++
		dead.ByClass[string(e.Class)]++
		dead.Reasons[string(e.Reason)]++
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		fail(w, err)
		return
	}
	counted := dead.ByClass
	if dead.AtLeast {
		counted = nil // a count cut short is no reading of the rate
	}
	h.hist.add(&st[0], counted, time.Now())
	entry := map[string]any{"id": j.ID, "actions": j.Actions, "input": j.Input, "total": j.Total, "dispatched": j.Dispatched,
		"status": j.Status, "reason": j.Reason, "max_deliver": j.MaxDeliver, "created": j.Created, "updated": j.Updated}
	writeJSON(w, http.StatusOK, jobView{Status: st[0], Actions: acts, Dead: dead, Job: entry, Now: time.Now().UTC()})
}

var errEnough = errors.New("enough")

// jobHandler serves a request about the job its path names (an id that
// cannot be one is a bad request; an unknown job, not found).
func (h *Handler) jobHandler(fn func(ctx context.Context, w http.ResponseWriter, r *http.Request, j *broker.Job)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := reqCtx(r)
		defer cancel()
		j, err := h.job(ctx, r)
		if err != nil {
			fail(w, err)
			return
		}
		fn(ctx, w, r, j)
	})
}

// job reads the job named by the request's path.
func (h *Handler) job(ctx context.Context, r *http.Request) (*broker.Job, error) {
	id := r.PathValue("job")
	if err := broker.CheckJobID(id); err != nil {
		return nil, badRequest{err}
	}
	j, _, err := h.cfg.B.GetJob(ctx, id)
	return j, err
}

// resultsView is a page of a job's results.
type resultsView struct {
	Results []broker.StoredMsg `json:"results"`
	Next    uint64             `json:"next,omitempty"`
}

// apiResults lists a job's results, a page at a time: ?action= and
// ?outcome= (ok, or a reason) narrow it, ?after=SEQ pages on, ?limit= sizes
// it.
func (h *Handler) apiResults(ctx context.Context, w http.ResponseWriter, r *http.Request, j *broker.Job) {
	q := r.URL.Query()
	action, outcome := q.Get("action"), q.Get("outcome")
	if action != "" && !broker.ValidName(action) {
		fail(w, badf("action %q is not a valid action name", action))
		return
	}
	if outcome != "" && outcome != broker.OutcomeOK && outcome != "failed" && !deadletter.ValidReason(outcome) {
		fail(w, badf("outcome %q: want ok, failed or a reason", outcome))
		return
	}
	after, limit, err := paging(q.Get("after"), q.Get("limit"))
	if err != nil {
		fail(w, err)
		return
	}
	page, next, err := h.cfg.B.Browse(ctx, broker.StreamResults, broker.ResultFilter(j.ID, action, outcome), after, limit)
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resultsView{Results: page, Next: next})
}

func paging(after, limit string) (uint64, int, error) {
	var a uint64
	n := ListDefault
	var err error
	if after != "" {
		if a, err = strconv.ParseUint(after, 10, 64); err != nil {
			return 0, 0, badf("after %q: want a stream sequence", after)
		}
	}
	if limit != "" {
		if n, err = strconv.Atoi(limit); err != nil || n < 1 || n > ListMax {
			return 0, 0, badf("limit %q: want 1 to %d", limit, ListMax)
		}
	}
	return a, n, nil
}

// recordView is a record's story: its results, action by action (each with
// its attempts, deliveries, errors and output), and its dead letters.
type recordView struct {
	Job         string             `json:"job"`
	Record      string             `json:"record"`
	Actions     []string           `json:"actions"`
	Results     []broker.StoredMsg `json:"results"`
	DeadLetters []deadLetter       `json:"dead_letters"`
}

// deadLetter is a dead letter as the page shows it: its entry, its headers
// as stored, and its body.
type deadLetter struct {
	*deadletter.Entry
	Subject string              `json:"subject"`
	Headers map[string][]string `json:"headers,omitempty"`
	Body    json.RawMessage     `json:"body,omitempty"` // the body, when it is JSON
	Text    string              `json:"text,omitempty"` // the body, when it is not
}

func newDeadLetter(e *deadletter.Entry) deadLetter {
	d := deadLetter{Entry: e, Subject: broker.DLQSubject(e.Job, e.Action)}
	if json.Valid(e.Data) {
		d.Body = e.Data
	} else {
		d.Text = string(e.Data)
	}
	return d
}

func (h *Handler) apiRecord(ctx context.Context, w http.ResponseWriter, r *http.Request, j *broker.Job) {
	id := r.PathValue("record")
	page, _, err := h.cfg.B.Browse(ctx, broker.StreamResults, broker.RecordFilter(j.ID, id), 0, ListMax)
	if err != nil {
		fail(w, err)
		return
	}
	v := recordView{Job: j.ID, Record: id, Actions: j.Actions, Results: []broker.StoredMsg{}, DeadLetters: []deadLetter{}}
	for _, m := range page {
		// A hashed subject token could, in principle, be shared: keep
		// only this id's results.
		var r struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(m.Data, &r) == nil && r.ID == id {
			v.Results = append(v.Results, m)
		}
	}
	err = deadletter.Each(ctx, h.cfg.B, deadletter.Filter{Job: j.ID}, func(e *deadletter.Entry) error {
		if e.Record == id {
			v.DeadLetters = append(v.DeadLetters, newDeadLetter(e))
		}
		return nil
	})
	if err != nil {
		fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// limiterView is one provider+key's shared limiter state (JETPOOL_LIMITS),
// with what it means now.
type limiterView struct {
	Key      string          `json:"key"`
	State    ratelimit.State `json:"state"`
	Circuit  string          `json:"circuit"`
	Cooling  bool            `json:"cooling"`
	Cooldown float64         `json:"cooldown_left_s,omitempty"`
	InFlight int             `json:"in_flight"`
	Mode     string          `json:"mode"` // "limits", "adaptive", or "none" (adaptive: false)
	// Pace is the request rate the live workers learned (calls/s, their
	// shares summed: one shared schedule; 0: none).
	Pace float64 `json:"pace,omitempty"`
}

// providersView is the providers page: limiters and workers.
type providersView struct {
	Limiters []limiterView         `json:"limiters"`
	Workers  []jetpool.WorkerStats `json:"workers"`
	Now      time.Time             `json:"now"`
}

func (h *Handler) apiProviders(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	store, err := ratelimit.NewKVStore(ctx, h.cfg.B)
	if err != nil {
		fail(w, err)
		return
	}
	states, err := store.List(ctx)
	if err != nil {
		fail(w, err)
		return
	}
	now := time.Now()
	v := providersView{Limiters: []limiterView{}, Now: now.UTC()}
	for k, s := range states {
		lv := limiterView{Key: k, State: s, Circuit: s.Breaker.State, Cooling: s.Cooling(now), InFlight: s.InFlight(now), Mode: "limits"}
		if lv.Circuit == "" {
			lv.Circuit = ratelimit.CircuitClosed
		}
		if lv.Cooling {
			lv.Cooldown = s.CooldownUntil.Sub(now).Seconds()
		}
		for _, w := range s.LiveWindows(now) {
			lv.Pace += w.Pace
		}
		if !s.Limits.Budgeted() {
			lv.Mode = "adaptive"
			if s.Limits.NoAdaptive {
				lv.Mode = "none"
			}
		}
		v.Limiters = append(v.Limiters, lv)
	}
	sort.Slice(v.Limiters, func(i, k int) bool { return v.Limiters[i].Key < v.Limiters[k].Key })
	if v.Workers, err = h.cfg.Client.Workers(ctx); err != nil || v.Workers == nil {
		v.Workers = []jetpool.WorkerStats{}
	}
	sort.Slice(v.Workers, func(i, k int) bool { return v.Workers[i].Worker < v.Workers[k].Worker })
	writeJSON(w, http.StatusOK, v)
}
