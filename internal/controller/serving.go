package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
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
