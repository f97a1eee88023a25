// Command openaisim is an OpenAI-compatible chat completions endpoint for
// benchmarks: every POST to /v1/chat/completions is answered after
// -latency with the last user message echoed, as jetpool's sim answers,
// and its usage. It counts the calls and the most in flight at once, and
// prints them on SIGTERM. Loopback only.
//
// With -tls FILE it serves HTTPS, where net/http speaks HTTP/2 as real
// providers' endpoints do, on a self-signed certificate for 127.0.0.1 that
// it writes to FILE: a worker trusts it with SSL_CERT_FILE=FILE.
//
//	go run ./bench/ab/openaisim -addr 127.0.0.1:8400 -latency 1s [-tls cert.pem]
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"math/big"
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
	certOut := flag.String("tls", "", "serve HTTPS (HTTP/2) on a self-signed certificate written to this file")
	streams := flag.Int("streams", 0, "HTTP/2: the most streams a connection carries at once (0: net/http's default)")
	flag.Parse()
	if host, _, err := net.SplitHostPort(*addr); err != nil || !net.ParseIP(host).IsLoopback() {
		fmt.Fprintln(os.Stderr, "openaisim: -addr must be a loopback address")
		os.Exit(2)
	}
	var calls, inFlight, peak, h2, conns atomic.Int64
	http.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		calls.Add(1)
		if r.ProtoMajor == 2 {
			h2.Add(1)
		}
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
	srv := &http.Server{Addr: *addr, ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		}}
	if *streams > 0 {
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: *streams}
	}
	go func() {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
		fmt.Printf("calls %d (%d over HTTP/2), most in flight %d, connections %d\n", calls.Load(), h2.Load(), peak.Load(), conns.Load())
		_ = srv.Close()
	}()
	serve := srv.ListenAndServe
	if *certOut != "" {
		cert, err := selfSigned(*certOut)
		if err != nil {
			fmt.Fprintln(os.Stderr, "openaisim:", err)
			os.Exit(1)
		}
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}}
		serve = func() error { return srv.ListenAndServeTLS("", "") }
	}
	if err := serve(); err != nil && err != http.ErrServerClosed {
		fmt.Fprintln(os.Stderr, "openaisim:", err)
		os.Exit(1)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and writes it, PEM, to path.
func selfSigned(path string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "openaisim"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
