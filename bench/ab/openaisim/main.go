// Command openaisim is an OpenAI-compatible chat completions endpoint for
// benchmarks: every POST to /v1/chat/completions is answered after
// -latency with the last user message echoed, as jetpool's sim answers,
// and its usage. It counts the calls and the most in flight at once, and
// prints them on SIGTERM. Loopback only.
//
//	go run ./bench/ab/openaisim -addr 127.0.0.1:8400 -latency 1s
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

type request struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8400", "listen address (loopback)")
	latency := flag.Duration("latency", time.Second, "how long each call takes")
	flag.Parse()
	if host, _, err := net.SplitHostPort(*addr); err != nil || !net.ParseIP(host).IsLoopback() {
		fmt.Fprintln(os.Stderr, "openaisim: -addr must be a loopback address")
		os.Exit(2)
	}
	var calls, inFlight, peak atomic.Int64
	http.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		calls.Add(1)
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		time.Sleep(*latency)
		text := "sim reply to: " + req.Messages[len(req.Messages)-1].Content
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-sim", "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": text}}},
			"usage": map[string]any{"prompt_tokens": len(req.Messages[len(req.Messages)-1].Content) / 4,
				"completion_tokens": len(text) / 4, "total_tokens": (len(text) + len(req.Messages[len(req.Messages)-1].Content)) / 4},
		})
	})
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		fmt.Printf("calls %d, most in flight %d\n", calls.Load(), peak.Load())
		_ = srv.Close()
	}()
	if err := srv.ListenAndServe(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "openaisim:", err)
		os.Exit(1)
	}
}
