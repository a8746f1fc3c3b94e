// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package controller runs gpufrac-controller: the admission webhooks of
// internal/admission behind TLS, fed by informer caches, with metrics and health
// endpoints. Every replica serves admission; the only shared state, the
// serving certificate's Secret, is created race-free by whichever replica
// comes first, so no leader election is needed.
package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/clientauth"
	"github.com/gpufrac/gpufrac/internal/metricsserver"
	"github.com/gpufrac/gpufrac/internal/packing/extender"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
	"github.com/gpufrac/gpufrac/internal/packing/policyparam"
	"github.com/gpufrac/gpufrac/internal/translate/hami"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// The controller's client limits by default, as kube-scheduler's
// (--kube-api-qps 50, --kube-api-burst 100). client-go's own default, 5
// queries per second, would hold the packing labels back: they take a
// patch for about every other pod the scheduler binds, at the scheduler's
// pace (docs/design/packing.md), and a label that lags lets the
// scheduler spread fractions.
const (
	DefaultKubeAPIQPS   = 50
	DefaultKubeAPIBurst = 100
)

// Config of the controller.
type Config struct {
	Client kubernetes.Interface
	// WebhookAddress is where the HTTPS admission server listens.
	WebhookAddress string
	// MetricsAddress serves /metrics, /healthz and /readyz (informers
	// synced and a certificate served); empty disables.
	MetricsAddress string
	Metrics        prometheus.Gatherer
	// CertDir, when set, holds tls.crt and tls.key, renewed by another
	// tool (cert-manager) and reloaded when they change; else a
	// certificate is made, renewed and kept as Cert says.
	CertDir string
	Cert    webhookcert.Config
	KAI     kai.Options
	// HAMi translation's options (its class defaults to KAI's
	// TimeSlicingClass, the --time-slicing-class flag).
	HAMi hami.Options
	// PackingLabels keeps the node label the packing webhook's node
	// affinity prefers (internal/packing/nodelabel); it needs nodes patch rights.
	PackingLabels bool
	// PackingParameter, when it names a ConfigMap, keeps there the list
	// of fraction templates the packing MutatingAdmissionPolicy reads
	// (internal/packing/policyparam); it needs get, create and update on it.
	PackingParameter types.NamespacedName
	// ExtenderAddress, when set, serves kube-scheduler's extender
	// prioritize verb there over plain HTTP (internal/packing/extender); empty
	// disables it.
	ExtenderAddress string
	// ClientAuth, when it names a CA file, makes the webhooks accept only
	// client certificates it signs: the one kube-apiserver presents where
	// its AdmissionConfiguration gives it one (internal/clientauth).
	ClientAuth clientauth.Config
	// TemplateGCGrace is how long a template gpufrac made stays once no
	// pod refers to it before it is deleted; 0 keeps every template.
	TemplateGCGrace time.Duration
	// Ready is called once the webhooks serve (tests wait on it).
	Ready func(address string)
}

// Run serves until ctx ends, and returns once everything it started has
// stopped.
func Run(ctx context.Context, cfg Config) error {
	logger := klog.FromContext(ctx)
	if cfg.HAMi.Class == "" {
		cfg.HAMi.Class = cfg.KAI.TimeSlicingClass
	}
	certs, err := newCertSource(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		if err := certs.Run(ctx); err != nil {
			logger.Error(err, "Webhook certificate stopped")
		}
	})
	ready := &readiness{synced: make(chan struct{}), certs: certs}
	if cfg.MetricsAddress != "" && cfg.Metrics != nil {
		_, stopped, err := metricsserver.StartWithChecks(ctx, cfg.MetricsAddress, cfg.Metrics, metricsserver.Checks{Readyz: ready.check})
		if err != nil {
			return err
		}
		defer func() { <-stopped }()
	}

	factory := informers.NewSharedInformerFactory(cfg.Client, 10*time.Minute)
	cluster := admission.NewInformerCluster(factory)
	claims := podterms.NewInformerClaims(factory, cfg.Client)
	packing, err := newPackingLoops(factory, cfg)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	// Shutdown waits for the informers, which stop only once ctx ends: an
	// error return must cancel first, or Run hangs until its parent ends.
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if err := cluster.WaitForSync(ctx); err != nil {
		return err
	}
	if err := claims.WaitForSync(ctx); err != nil {
		return err
	}
	RegisterClusterMetrics(ctx, cfg.Client, factory, cluster, cfg.Metrics)
	close(ready.synced)
	if err := waitForCertificate(ctx, certs); err != nil {
		return fmt.Errorf("waiting for the webhook certificate: %w", err)
	}

	loop, stopLoops := startTemplateLoops(ctx, cfg, &wg)
	defer func() {
		cancel()
		stopLoops()
	}()
	wg.Go(func() { afterSync(ctx, cfg, loop) })
	if packing.labels != nil {
		wg.Go(func() { packing.labels.Run(ctx, 2) })
	}
	if packing.param != nil {
		wg.Go(func() { packing.param.Run(ctx) })
	}
	if packing.ext != nil {
		stopped, err := serveExtender(ctx, cfg.ExtenderAddress, packing.ext)
		if err != nil {
			return err
		}
		defer func() { <-stopped }()
	}

	return serveWebhooks(ctx, cfg, certs, cluster, claims)
}

// startTemplateLoops starts the loops that create the templates translated
// pods name, from the pods the API server holds (never the webhook): one
// per request language, KAI's returned for afterSync. stop shuts their
// informers down once ctx is cancelled.
func startTemplateLoops(ctx context.Context, cfg Config, wg *sync.WaitGroup) (kaiLoop *templateLoop, stop func()) {
	kaiLoop, kaiFactories := newTemplateLoop(ctx, cfg.Client, kaiTranslation(cfg.KAI))
	hamiLoop, hamiFactories := newTemplateLoop(ctx, cfg.Client, hamiTranslation(cfg.HAMi))
	factories := append(slices.Clone(kaiFactories), hamiFactories...)
	for _, f := range factories {
		f.Start(ctx.Done())
	}
	wg.Go(func() { kaiLoop.run(ctx, 2) })
	wg.Go(func() { hamiLoop.run(ctx, 2) })
	return kaiLoop, func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}
}

// afterSync runs, once the template loop's caches hold the cluster, the
// report of pods admitted while no webhook answered and the deletion of
// templates no pod refers to any more.
func afterSync(ctx context.Context, cfg Config, loop *templateLoop) {
	if !cache.WaitForCacheSync(ctx.Done(), loop.synced...) {
		return
	}
	if _, err := reportMissedPods(ctx, cfg.Client, loop.recorder, []string{metav1.NamespaceSystem, cfg.Cert.Namespace}); err != nil {
		klog.FromContext(ctx).Error(err, "Finding pods admitted while the webhook was down")
	}
	if cfg.TemplateGCGrace > 0 {
		newTemplateGC(cfg.Client, loop, cfg.TemplateGCGrace).run(ctx)
	}
}

// packingLoops are the packing side's loops, each nil where cfg turns it
// off: the node label the packing webhook's node affinity prefers, the
// packing policy's parameter, the scheduler extender.
type packingLoops struct {
	labels *nodelabel.Loop
	param  *policyparam.Loop
	ext    *extender.Extender
}

// newPackingLoops builds the packing loops cfg asks for on factory's
// informers (before the factory starts, so it starts theirs too).
func newPackingLoops(factory informers.SharedInformerFactory, cfg Config) (packingLoops, error) {
	var loops packingLoops
	var err error
	if cfg.PackingLabels {
		if loops.labels, err = nodelabel.New(factory, cfg.Client); err != nil {
			return packingLoops{}, err
		}
	}
	if cfg.PackingParameter.Name != "" {
		if loops.param, err = policyparam.New(factory, cfg.Client, cfg.PackingParameter); err != nil {
			return packingLoops{}, err
		}
	}
	if cfg.ExtenderAddress != "" {
		if loops.ext, err = extender.New(factory, cfg.Client); err != nil {
			return packingLoops{}, err
		}
	}
	return loops, nil
}

// serveWebhooks serves the admission webhooks on cfg.WebhookAddress until
// ctx ends (then shuts the server down, waiting up to 10s for requests in
// flight) or the server fails.
func serveWebhooks(ctx context.Context, cfg Config, certs certSource, cluster *admission.InformerCluster, claims *podterms.InformerClaims) error {
	logger := klog.FromContext(ctx)
	srv := &admission.Server{Cluster: cluster, Reader: cfg.Client, KAI: cfg.KAI, HAMi: cfg.HAMi, Claims: claims}
	lis, err := net.Listen("tcp", cfg.WebhookAddress)
	if err != nil {
		return fmt.Errorf("listening for admission on %s: %w", cfg.WebhookAddress, err)
	}
	httpSrv, err := newWebhookServer(srv.Handler(), certs.GetCertificate, defaultWebhookTimeouts(), cfg.ClientAuth)
	if err != nil {
		_ = lis.Close()
		return fmt.Errorf("admission server: %w", err)
	}
	errs := make(chan error, 1)
	go func() { errs <- httpSrv.ServeTLS(lis, "", "") }()
	logger.Info("Serving admission webhooks", "address", lis.Addr().String())
	if cfg.Ready != nil {
		cfg.Ready(lis.Addr().String())
	}
	select {
	case <-ctx.Done():
		shutdownCtx, cancelShutdown := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancelShutdown()
		err := httpSrv.Shutdown(shutdownCtx)
		<-errs //nolint:errcheck // after Shutdown, Serve returns ErrServerClosed
		return err
	case err := <-errs:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("admission server: %w", err)
	}
}
