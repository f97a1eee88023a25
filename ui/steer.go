package ui

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/steer"
	"github.com/jetpool/jetpool/workflow"
)

// apiSteer cancels, pauses, resumes or reprioritises the job its path
// names, as `jetpool job cancel|pause|resume|priority` do (package steer). A job that has ended (or
// has no work consumer to pause) is a conflict.
func (h *Handler) apiSteer(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("job")
	if err := broker.CheckJobID(id); err != nil {
		fail(w, badRequest{err})
		return
	}
	// Not the request's context: a cancel whose tab closed still waits
	// for the workers' word, and the log says how it ended.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), steer.StopWaitDefault+5*time.Second)
	defer cancel()
	var (
		out any
		err error
	)
	what := r.PathValue("what")
	switch what {
	case "cancel":
		out, err = h.cfg.Client.Cancel(ctx, id, steer.CancelOptions{Reason: "cancelled from the dashboard"})
	case "pause":
		out, err = h.cfg.Client.Pause(ctx, id, time.Time{})
	case "resume":
		out, err = h.cfg.Client.Resume(ctx, id)
	case "priority":
		var body struct {
			Priority int `json:"priority"`
		}
		if derr := json.NewDecoder(r.Body).Decode(&body); derr != nil {
			fail(w, badf("priority: %v", derr))
			return
		}
		if body.Priority < workflow.PriorityMin || body.Priority > workflow.PriorityMax {
			fail(w, badf("priority %d is out of range %d-%d", body.Priority, workflow.PriorityMin, workflow.PriorityMax))
			return
		}
		var j *broker.Job
		if j, err = h.cfg.Client.SetPriority(ctx, id, body.Priority); err == nil {
			out = map[string]any{"job": id, "priority": j.Weight()}
		}
	default:
		fail(w, badf("%q: want cancel, pause, resume or priority", what))
		return
	}
	h.cfg.Log.Info().Str("remote", r.RemoteAddr).Str("job", id).Str("action", what).Err(err).Msg("dashboard: steer")
	switch {
	case errors.Is(err, broker.ErrJobEnded), errors.Is(err, broker.ErrNoConsumer):
		writeJSON(w, http.StatusConflict, map[string]any{"error": err.Error()})
	case errors.Is(err, steer.ErrStillCalling):
		writeJSON(w, http.StatusAccepted, map[string]any{"error": err.Error(), "report": out})
	case err != nil:
		fail(w, err)
	default:
		writeJSON(w, http.StatusOK, out)
	}
}
