// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package metricsserver serves the Prometheus endpoint and the probes
// of gpufrac's long-running binaries, and stops with their context.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

// Checks are the probes' answers; nil means always ok.
type Checks struct {
	// Healthz fails when the process should be restarted.
	Healthz func() error
	// Readyz fails while the process should get no traffic.
	Readyz func() error
}

// Limits bound what one client can make the server hold. Scrapes and
// probes are GETs without a body and with a few small headers, so nothing
// a legitimate client sends comes near them.
type Limits struct {
	// ReadHeader and Read bound the time to send the request (a slow
	// client is disconnected); Write bounds the response; Idle a kept-alive
	// connection between requests.
	ReadHeader, Read, Write, Idle time.Duration
	// MaxHeaderBytes bounds the request line and headers; a larger request
	// gets 431 Request Header Fields Too Large.
	MaxHeaderBytes int
	// MaxProbeMessageBytes bounds the failure message a probe returns.
	MaxProbeMessageBytes int
	// ProbeInterval is how long a check's answer is reused: the plugin's
	// health check dials its own sockets and reads the checkpoint, so a
	// flood of probe requests runs it at most once per interval (callers
	// arriving while it runs wait for that run) instead of once each.
	ProbeInterval time.Duration
}

// DefaultLimits are the limits of Start and StartWithChecks.
func DefaultLimits() Limits {
	return Limits{ReadHeader: 10 * time.Second, Read: 10 * time.Second, Write: 30 * time.Second, Idle: 90 * time.Second,
		MaxHeaderBytes: 16 << 10, MaxProbeMessageBytes: 1 << 10, ProbeInterval: time.Second}
}

// Start listens on addr and serves /metrics from gatherer and /healthz until
// ctx ends. It returns the bound address (useful with port 0).
func Start(ctx context.Context, addr string, gatherer prometheus.Gatherer) (string, error) {
	bound, _, err := StartWithChecks(ctx, addr, gatherer, Checks{})
	return bound, err
}

// StartWithChecks is Start with /healthz and /readyz answering checks. The
// returned channel is closed once the server has stopped after ctx ended.
func StartWithChecks(ctx context.Context, addr string, gatherer prometheus.Gatherer, checks Checks) (string, <-chan struct{}, error) {
	return StartWithLimits(ctx, addr, gatherer, checks, DefaultLimits())
}

// StartWithLimits is StartWithChecks with the given limits.
func StartWithLimits(ctx context.Context, addr string, gatherer prometheus.Gatherer, checks Checks, limits Limits) (string, <-chan struct{}, error) {
	logger := klog.FromContext(ctx)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	// GET patterns answer GET and HEAD; any other method gets 405 Method
	// Not Allowed, and any other path 404, before a handler runs.
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("GET /healthz", probe(coalesce(checks.Healthz, limits.ProbeInterval), limits.MaxProbeMessageBytes))
	mux.HandleFunc("GET /readyz", probe(coalesce(checks.Readyz, limits.ProbeInterval), limits.MaxProbeMessageBytes))
	// Every read and write is bounded, so a slow client cannot hold a
	// connection, nor a large one memory.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: limits.ReadHeader, ReadTimeout: limits.Read,
		WriteTimeout: limits.Write, IdleTimeout: limits.Idle, MaxHeaderBytes: limits.MaxHeaderBytes}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Metrics server stopped")
		}
	}()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		<-served
	}()
	logger.Info("Serving metrics", "address", lis.Addr().String())
	return lis.Addr().String(), stopped, nil
}

// coalesce runs check at most once per interval: later callers within it
// get the last answer, and callers arriving during a run wait for it.
func coalesce(check func() error, interval time.Duration) func() error {
	if check == nil || interval <= 0 {
		return check
	}
	var mu sync.Mutex
	var last time.Time
	var lastErr error
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		if !last.IsZero() && time.Since(last) < interval {
			return lastErr
		}
		lastErr = check()
		last = time.Now()
		return lastErr
	}
}

func probe(check func() error, maxMessage int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if check != nil {
			if err := check(); err != nil {
				klog.FromContext(r.Context()).V(2).Info("Probe failed", "path", r.URL.Path, "err", err)
				http.Error(w, safetext.Cap(err.Error(), maxMessage), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}
