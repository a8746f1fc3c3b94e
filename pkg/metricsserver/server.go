// Package metricsserver serves the Prometheus endpoint and the liveness probe
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

// Start listens on addr and serves /metrics from gatherer and /healthz until
// ctx ends. It returns the bound address (useful with port 0).
func Start(ctx context.Context, addr string, gatherer prometheus.Gatherer) (string, error) {
	logger := klog.FromContext(ctx)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("listening for metrics on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{ErrorLog: nil}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	// Scrapes are GETs without a body: every read and write is bounded, so
	// a slow client cannot hold a connection.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 90 * time.Second}
	go func() {
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Metrics server stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	logger.Info("Serving metrics", "address", lis.Addr().String())
	return lis.Addr().String(), nil
}
