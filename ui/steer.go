package ui

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/jetpool/jetpool/broker"
	"github.com/jetpool/jetpool/steer"
)

// apiSteer cancels, pauses or resumes the job its path names, as `jetpool
// job cancel|pause|resume` do (package steer). A job that has ended (or
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
		out, err = steer.Cancel(ctx, h.cfg.B, id, steer.CancelOptions{Reason: "cancelled from the dashboard"})
	case "pause":
		out, err = steer.Pause(ctx, h.cfg.B, id, time.Time{})
	case "resume":
		out, err = steer.Resume(ctx, h.cfg.B, id)
	default:
		fail(w, badf("%q: want cancel, pause or resume", what))
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
