package ui

import (
	"context"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jetpool/jetpool"
	"github.com/jetpool/jetpool/broker"
)

// Bounds of the rate history the dashboard keeps for its charts.
const (
	// HistoryWindow is how far back a job's chart goes: older samples
	// are dropped.
	HistoryWindow = 15 * time.Minute
	// HistoryGap is the least time between two samples of a job: a poll
	// sooner after the last (another tab) adds none.
	HistoryGap = time.Second
	// HistoryJobs bounds the jobs with a history: past it, the one
	// sampled longest ago is dropped.
	HistoryJobs = 100
)

// sample is one reading of a job's counters.
type sample struct {
	At time.Time
	// Done is the records done, succeeded or failed (a pipeline's steps
	// over its actions: it moves before records finish their last one).
	Done float64
	// ByClass is the job's dead letters by error class, when this reading
	// counted them (the job's page does; the jobs list does not).
	ByClass map[string]int
}

// history keeps, in this process, the last HistoryWindow of samples of
// each job the page polls: its own polls of api/jobs and api/jobs/{job}
// feed it, so a chart survives a reload of the page (and is shared by its
// tabs), and is lost when the dashboard's process stops. Nothing is read
// for it that the page did not ask for.
type history struct {
	mu   sync.Mutex
	jobs map[string][]sample
}

// active reports whether a job's counters move: only those are sampled
// from the jobs list (one that ended gets its last sample there too).
func (hs *history) active(st *jetpool.JobStatus) bool {
	if st.Status == broker.JobRunning || st.Status == broker.JobDispatching {
		return true
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	_, ok := hs.jobs[st.Job]
	return ok
}

// add records st (with its dead letters by class, or nil) at now.
func (hs *history) add(st *jetpool.JobStatus, byClass map[string]int, now time.Time) {
	done := float64(st.Succeeded + st.Failed)
	if st.StepsTotal > 0 && st.Total > 0 {
		done = float64(st.Steps) / (float64(st.StepsTotal) / float64(st.Total))
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.jobs == nil {
		hs.jobs = map[string][]sample{}
	}
	ss, ok := hs.jobs[st.Job]
	if n := len(ss); n > 0 && now.Sub(ss[n-1].At) < HistoryGap {
		if byClass == nil || ss[n-1].ByClass != nil {
			return
		}
		ss = ss[:n-1] // a counted reading replaces one that did not count
	}
	if !ok && len(hs.jobs) >= HistoryJobs {
		hs.evict()
	}
	i := 0
	for i < len(ss) && now.Sub(ss[i].At) > HistoryWindow {
		i++
	}
	hs.jobs[st.Job] = append(ss[i:], sample{At: now, Done: done, ByClass: maps.Clone(byClass)})
}

// evict drops the job sampled longest ago.
func (hs *history) evict() {
	var oldest string
	var at time.Time
	for job, ss := range hs.jobs {
		if last := ss[len(ss)-1].At; oldest == "" || last.Before(at) {
			oldest, at = job, last
		}
	}
	delete(hs.jobs, oldest)
}

// point is the rates between two samples, at the later one.
type point struct {
	At time.Time `json:"t"`
	// Rate is records done a second since the previous sample.
	Rate float64 `json:"rate"`
	// Errors is records dead-lettered a second by error class since the
	// previous sample that counted them; null when this one did not.
	// A replay or purge lowers the count: that is no negative rate.
	Errors map[string]float64 `json:"errors"`
}

// historyView is a job's chart.
type historyView struct {
	Job      string    `json:"job"`
	WindowS  float64   `json:"window_s"`
	Samples  int       `json:"samples"`
	Since    time.Time `json:"since,omitzero"` // the first sample in the window
	Classes  []string  `json:"classes"`        // every class with errors in the window
	Points   []point   `json:"points"`
	Now      time.Time `json:"now"`
	Source   string    `json:"source"`
	Finished bool      `json:"finished,omitempty"`
}

// view is job's rates over the last window.
func (hs *history) view(job string, window time.Duration, now time.Time) historyView {
	v := historyView{Job: job, WindowS: window.Seconds(), Points: []point{}, Classes: []string{}, Now: now,
		Source: "the dashboard's polls, sampled in its process (HistoryWindow); lost when it stops"}
	hs.mu.Lock()
	ss := slices.Clone(hs.jobs[job])
	hs.mu.Unlock()
	i := 0
	for i < len(ss) && now.Sub(ss[i].At) > window {
		i++
	}
	ss = ss[i:]
	v.Samples = len(ss)
	if len(ss) > 0 {
		v.Since = ss[0].At
	}
	classes := map[string]bool{}
	var counted *sample
	for k := range ss {
		s := &ss[k]
		if k > 0 {
			prev := &ss[k-1]
			p := point{At: s.At, Rate: max(s.Done-prev.Done, 0) / s.At.Sub(prev.At).Seconds()}
			if s.ByClass != nil && counted != nil {
				dt := s.At.Sub(counted.At).Seconds()
				p.Errors = map[string]float64{}
				for c, n := range s.ByClass {
					if d := n - counted.ByClass[c]; d > 0 {
						p.Errors[c] = float64(d) / dt
						classes[c] = true
					}
				}
			}
			v.Points = append(v.Points, p)
		}
		if s.ByClass != nil {
			counted = s
		}
	}
	v.Classes = slices.Sorted(maps.Keys(classes))
	if v.Classes == nil {
		v.Classes = []string{}
	}
	return v
}

// apiHistory is a job's records done and dead-lettered a second over the
// last ?minutes= (at most HistoryWindow, the default), from the samples
// the dashboard's own polls took.
func (h *Handler) apiHistory(_ context.Context, w http.ResponseWriter, r *http.Request, j *broker.Job) {
	window := HistoryWindow
	if m := r.URL.Query().Get("minutes"); m != "" {
		n, err := strconv.Atoi(m)
		if err != nil || n < 1 || time.Duration(n)*time.Minute > HistoryWindow {
			fail(w, badf("minutes %q: want 1 to %d", m, int(HistoryWindow.Minutes())))
			return
		}
		window = time.Duration(n) * time.Minute
	}
	v := h.hist.view(j.ID, window, time.Now())
	v.Finished = j.Ended()
	writeJSON(w, http.StatusOK, v)
}
