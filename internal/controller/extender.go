// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/packing/extender"
)

// serveExtender serves the scheduler extender on address until ctx ends;
// the returned channel closes once the server has stopped. Plain HTTP:
// the verb reads a pod and node names and answers scores, changes nothing,
// and kube-scheduler reaches it over the cluster network (restrict it with
// a NetworkPolicy; docs/design/packing.md). Timeouts are short because
// the scheduler gives up after its httpTimeout anyway.
func serveExtender(ctx context.Context, address string, ext *extender.Extender) (<-chan struct{}, error) {
	logger := klog.FromContext(ctx)
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("listening for the scheduler extender on %s: %w", address, err)
	}
	srv := &http.Server{
		Handler:           ext.Handler(),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       90 * time.Second,
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Scheduler extender stopped")
		}
	}()
	go func() {
		<-ctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
	}()
	logger.Info("Serving the scheduler extender", "address", lis.Addr().String(), "path", extender.PathPrioritize)
	return stopped, nil
}
