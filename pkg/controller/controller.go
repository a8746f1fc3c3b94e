// Package controller runs gpufrac-controller: the admission webhooks of
// pkg/webhook behind TLS, fed by informer caches, with metrics and health
// endpoints. Every replica serves admission; the only shared state, the
// serving certificate's Secret, is created race-free by whichever replica
// comes first, so no leader election is needed.
package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/pkg/kai"
	"github.com/gpufrac/gpufrac/pkg/metricsserver"
	"github.com/gpufrac/gpufrac/pkg/webhook"
	"github.com/gpufrac/gpufrac/pkg/webhookcert"
)

// Config of the controller.
type Config struct {
	Client kubernetes.Interface
	// WebhookAddress is where the HTTPS admission server listens.
	WebhookAddress string
	// MetricsAddress serves /metrics and /healthz; empty disables.
	MetricsAddress string
	Metrics        prometheus.Gatherer
	// CertDir, when set, holds tls.crt and tls.key (cert-manager); else a
	// certificate is made and kept as Cert says.
	CertDir string
	Cert    webhookcert.Config
	KAI     kai.Options
	// Ready is called once the webhooks serve (tests wait on it).
	Ready func(address string)
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactory(cfg.Client, 10*time.Minute)
	cluster := webhook.NewInformerCluster(factory)
	claims := webhook.NewInformerClaims(factory, cfg.Client)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if err := cluster.WaitForSync(ctx); err != nil {
		return err
	}
	if err := claims.WaitForSync(ctx); err != nil {
		return err
	}

	var cert *tls.Certificate
	if cfg.CertDir != "" {
		pair, err := tls.LoadX509KeyPair(filepath.Join(cfg.CertDir, "tls.crt"), filepath.Join(cfg.CertDir, "tls.key"))
		if err != nil {
			return fmt.Errorf("loading the webhook certificate from %s: %w", cfg.CertDir, err)
		}
		cert = &pair
	} else {
		var err error
		if cert, err = webhookcert.Ensure(ctx, cfg.Client, cfg.Cert); err != nil {
			return err
		}
	}

	if cfg.MetricsAddress != "" && cfg.Metrics != nil {
		if _, err := metricsserver.Start(ctx, cfg.MetricsAddress, cfg.Metrics); err != nil {
			return err
		}
	}

	srv := &webhook.Server{Client: cfg.Client, Cluster: cluster, Events: webhook.NewEventRecorder(ctx, cfg.Client), KAI: cfg.KAI, Claims: claims}
	lis, err := net.Listen("tcp", cfg.WebhookAddress)
	if err != nil {
		return fmt.Errorf("listening for admission on %s: %w", cfg.WebhookAddress, err)
	}
	httpSrv := &http.Server{
		Handler:           srv.Handler(),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{*cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	errs := make(chan error, 1)
	go func() { errs <- httpSrv.ServeTLS(lis, "", "") }()
	logger.Info("Serving admission webhooks", "address", lis.Addr().String())
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		return httpSrv.Shutdown(shutdownCtx)
	case err := <-errs:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("admission server: %w", err)
	}
}
