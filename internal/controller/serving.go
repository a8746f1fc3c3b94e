// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/clientauth"
)

// certSource is where the serving certificate comes from: the Secret this
// controller keeps renewed, or files cert-manager renews.
type certSource interface {
	Run(ctx context.Context) error
	GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Ready() error
}

func newCertSource(cfg Config) (certSource, error) {
	if cfg.CertDir != "" {
		return webhookcert.NewFileSource(cfg.CertDir)
	}
	return webhookcert.New(cfg.Client, cfg.Cert)
}

// readiness is what /readyz reports: the informers have synced and a
// certificate is served.
type readiness struct {
	synced chan struct{}
	certs  certSource
}

func (r *readiness) check() error {
	select {
	case <-r.synced:
	default:
		return errors.New("informer caches have not synced yet")
	}
	return r.certs.Ready()
}

// waitForCertificate returns once certs has a certificate to serve.
func waitForCertificate(ctx context.Context, certs certSource) error {
	return wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(context.Context) (bool, error) {
		return certs.Ready() == nil, nil
	})
}

// webhookTimeouts bound every read and write of the admission server.
type webhookTimeouts struct {
	header, read, write, idle time.Duration
}

// defaultWebhookTimeouts: the API server calls a webhook with a timeout of
// at most 30 s (admissionregistration.k8s.io/v1 timeoutSeconds, default
// 10, documented), so no honest request needs longer to arrive or be
// answered.
func defaultWebhookTimeouts() webhookTimeouts {
	return webhookTimeouts{header: 10 * time.Second, read: 30 * time.Second, write: 30 * time.Second, idle: 90 * time.Second}
}

// newWebhookServer is the HTTPS server of the admission webhooks. Every
// read and write is bounded: a client that trickles its headers or body
// holds a connection for at most the read timeout, and the handler caps
// the body (admission.MaxBodyBytes).
func newWebhookServer(h http.Handler, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error), t webhookTimeouts, auth clientauth.Config) (*http.Server, error) {
	// GetCertificate is asked on every handshake, so a renewed
	// certificate is served without a restart.
	tlsConfig := &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12}
	if err := auth.Apply(tlsConfig); err != nil {
		return nil, err
	}
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: t.header,
		ReadTimeout:       t.read,
		WriteTimeout:      t.write,
		IdleTimeout:       t.idle,
		// The API server sends a handful of headers; 64 KiB is ample
		// (net/http's default is 1 MiB).
		MaxHeaderBytes: 64 << 10,
	}, nil
}
