// Package metricsserver serves the Prometheus endpoint and the probes
// of gpufrac's long-running binaries, and stops with their context.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Checks are the probes' answers; nil means always ok.
type Checks struct {
	// Healthz fails when the process should be restarted.
	Healthz func() error
	// Readyz fails while the process should get no traffic.
	Readyz func() error
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
	logger := klog.FromContext(ctx)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("/healthz", probe(checks.Healthz))
	mux.HandleFunc("/readyz", probe(checks.Readyz))
	// Scrapes are GETs without a body: every read and write is bounded, so
	// a slow client cannot hold a connection.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second}
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

func probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if check != nil {
			if err := check(); err != nil {
				klog.FromContext(r.Context()).V(2).Info("Probe failed", "path", r.URL.Path, "err", err)
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	}
}
