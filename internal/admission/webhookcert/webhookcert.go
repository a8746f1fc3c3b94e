// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package webhookcert gives the admission webhooks a serving certificate
// that renews itself, without cert-manager: a self-signed CA and serving
// certificate for the Service's DNS names, kept in a Secret that every
// replica watches, and the CA bundle of the webhook configurations kept in
// step with it. Replicas need no leader election: the Secret is written
// with optimistic concurrency, so one renewal wins, and the rules below
// keep admission working while replicas switch certificates at different
// moments.
//
//   - A renewal adds the new CA to the webhook configurations' caBundle
//     before it writes the Secret, and the bundle keeps the previous CA
//     until that expires: during the overlap the API server trusts both the
//     old and the new serving certificate.
//   - A replica starts serving a new certificate only after the Secret's
//     serve-after time (written as the renewal time plus ActivationDelay)
//     and ActivationDelay after it last had to add a CA to a bundle itself,
//     so the API server has seen the bundle before any replica serves it.
//   - A Secret that is missing, was not made here (foreign), cannot be
//     parsed, does not cover the Service, is not signed by its own CA
//     bundle or is within RenewBefore of expiring is replaced.
//
// FileSource is the other way: certificate files another tool (cert-manager)
// renews, reloaded without a restart.
package webhookcert

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Annotations on the Secret.
const (
	// AnnotationManagedBy marks a Secret this package made; one without it
	// is foreign and replaced.
	AnnotationManagedBy = "gpufrac.dev/managed-by"
	managedByValue      = "gpufrac-controller"
	// AnnotationServeAfter is when replicas may start serving the
	// Secret's certificate (RFC 3339).
	AnnotationServeAfter = "gpufrac.dev/serve-after"
	// CAKey holds the CA bundle: the CA of the current certificate and of
	// earlier ones not expired yet.
	CAKey = "ca.crt"
)

// Defaults of Config's durations.
const (
	DefaultLifetime        = 365 * 24 * time.Hour
	DefaultActivationDelay = 10 * time.Second
)

// Bounds of a self-signed certificate's lifetime (--cert-lifetime).
const (
	// MinLifetime: a certificate is renewed a third of its lifetime
	// before it expires, and every renewal rewrites the Secret and both
	// webhook configurations' CA bundles, which every API server must
	// load before the new certificate is served (DefaultActivationDelay).
	// A lifetime of 1s rewrote the Secret 10 to 20 times a second; at
	// 1h a renewal comes every 40 minutes.
	MinLifetime = time.Hour
	// MaxLifetime: ten years, past which a certificate outlives any
	// cluster it serves.
	MaxLifetime = 10 * 365 * 24 * time.Hour
	// MinLifetimeReason is why, for the flag's error.
	MinLifetimeReason = "every renewal (a third of the lifetime before expiry) rewrites the certificate Secret and both webhook CA bundles, which every API server must load; a shorter lifetime turns that into a constant stream of writes"
)

// Config names the objects involved and the certificate's timing.
type Config struct {
	Namespace  string
	SecretName string
	// ServiceName is the webhook Service; the certificate covers its DNS
	// names in Namespace.
	ServiceName string
	// ExtraHosts are further DNS names or IP addresses the certificate
	// covers (a test's loopback address).
	ExtraHosts []string
	// MutatingConfig and ValidatingConfig are the webhook configurations
	// whose caBundle is kept in step; empty skips one.
	MutatingConfig, ValidatingConfig string

	// Lifetime of a new certificate; DefaultLifetime when zero.
	Lifetime time.Duration
	// RenewBefore is how long before expiry a certificate is replaced;
	// a third of Lifetime when zero.
	RenewBefore time.Duration
	// ActivationDelay is how long a new CA is in the webhook
	// configurations before any replica serves a certificate it signed:
	// the API server's view of the configurations must catch up.
	// DefaultActivationDelay when zero.
	ActivationDelay time.Duration
	// Resync bounds the time between two checks of the Secret and the
	// bundles (a Helm upgrade that resets a caBundle is repaired within
	// it); one minute, or RenewBefore/4 if shorter, when zero.
	Resync time.Duration
}

func (c Config) withDefaults() Config {
	if c.Lifetime == 0 {
		c.Lifetime = DefaultLifetime
	}
	if c.RenewBefore == 0 {
		c.RenewBefore = c.Lifetime / 3
	}
	if c.ActivationDelay == 0 {
		c.ActivationDelay = DefaultActivationDelay
	}
	if c.Resync == 0 {
		c.Resync = min(time.Minute, c.RenewBefore/4)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Namespace == "" || c.SecretName == "" || c.ServiceName == "":
		return errors.New("webhook certificate: namespace, secret and service names must be set")
	case c.RenewBefore >= c.Lifetime:
		return fmt.Errorf("webhook certificate: renew-before %s must be shorter than the lifetime %s", c.RenewBefore, c.Lifetime)
	}
	return nil
}

// served is the certificate a replica serves.
type served struct {
	pair *tls.Certificate
	raw  []byte // the leaf, to compare
}

// Rotator keeps the Secret, the bundles and the served certificate in
// step. Create it with New, serve with GetCertificate, and Run it.
type Rotator struct {
	client kubernetes.Interface
	cfg    Config
	now    func() time.Time

	serving atomic.Pointer[served]
	trigger chan struct{}
	// bundleAddedAt is when this replica last added a CA to a bundle;
	// only the Run loop touches it.
	bundleAddedAt time.Time
}

// New validates cfg and returns a Rotator that serves nothing until Run
// has found or made a certificate.
func New(client kubernetes.Interface, cfg Config) (*Rotator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Rotator{client: client, cfg: cfg, now: time.Now, trigger: make(chan struct{}, 1)}, nil
}

// GetCertificate is for tls.Config: the certificate this replica serves.
func (r *Rotator) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s := r.serving.Load(); s != nil {
		return s.pair, nil
	}
	return nil, errors.New("no webhook serving certificate yet")
}

// Ready is nil once a certificate is served.
func (r *Rotator) Ready() error {
	if r.serving.Load() == nil {
		return fmt.Errorf("no serving certificate yet from Secret %s/%s", r.cfg.Namespace, r.cfg.SecretName)
	}
	return nil
}

func (r *Rotator) poke() {
	select {
	case r.trigger <- struct{}{}:
	default:
	}
}

// Run watches the Secret and the webhook configurations and keeps them in
// step until ctx ends; its watches are shut down before it returns.
func (r *Rotator) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("secret", klog.KRef(r.cfg.Namespace, r.cfg.SecretName))
	ctx = klog.NewContext(ctx, logger)
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.poke() },
		UpdateFunc: func(any, any) { r.poke() },
		DeleteFunc: func(any) { r.poke() },
	}
	// One object each, watched by name: the chart's RBAC grants no more.
	byName := func(namespace, name string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithNamespace(namespace),
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
			}))
	}
	var factories []informers.SharedInformerFactory
	defer func() {
		for _, f := range factories {
			f.Shutdown()
		}
	}()
	secrets := byName(r.cfg.Namespace, r.cfg.SecretName)
	factories = append(factories, secrets)
	if _, err := secrets.Core().V1().Secrets().Informer().AddEventHandler(handler); err != nil {
		return fmt.Errorf("watching the certificate Secret: %w", err)
	}
	if name := r.cfg.MutatingConfig; name != "" {
		f := byName("", name)
		factories = append(factories, f)
		if _, err := f.Admissionregistration().V1().MutatingWebhookConfigurations().Informer().AddEventHandler(handler); err != nil {
			return fmt.Errorf("watching webhook configurations: %w", err)
		}
	}
	if name := r.cfg.ValidatingConfig; name != "" {
		f := byName("", name)
		factories = append(factories, f)
		if _, err := f.Admissionregistration().V1().ValidatingWebhookConfigurations().Informer().AddEventHandler(handler); err != nil {
			return fmt.Errorf("watching webhook configurations: %w", err)
		}
	}
	for _, f := range factories {
		f.Start(ctx.Done())
	}

	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.trigger:
		case <-timer.C:
		}
		next, err := r.sync(ctx)
		if err != nil {
			logger.Error(err, "Keeping the webhook certificate in step; retrying")
			next = min(next, 2*time.Second)
		}
		timer.Reset(next)
	}
}

// sync brings Secret, bundles and served certificate one step closer and
// says when to look again.
func (r *Rotator) sync(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	now := r.now()
	secret, err := r.client.CoreV1().Secrets(r.cfg.Namespace).Get(ctx, r.cfg.SecretName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		secret = nil
	case err != nil:
		return r.cfg.Resync, fmt.Errorf("reading Secret %s/%s: %w", r.cfg.Namespace, r.cfg.SecretName, err)
	}
	v := judge(secret, r.cfg, now)
	if v.renew != "" {
		logger.Info("Renewing the webhook serving certificate", "reason", v.renew)
		if err := r.renew(ctx, secret, v, now); err != nil {
			return r.cfg.Resync, err
		}
		return 0, nil // read back what won
	}
	added, err := r.keepBundles(ctx, v.bundle, false)
	if err != nil {
		return r.cfg.Resync, err
	}
	if added {
		r.bundleAddedAt = now
	}
	next := min(r.cfg.Resync, v.leaf.NotAfter.Add(-r.cfg.RenewBefore).Sub(now))
	if cur := r.serving.Load(); cur == nil || string(cur.raw) != string(v.leaf.Raw) {
		serveAt := v.serveAfter
		if t := r.bundleAddedAt.Add(r.cfg.ActivationDelay); t.After(serveAt) {
			serveAt = t
		}
		if wait := serveAt.Sub(now); wait > 0 {
			logger.V(2).Info("Waiting before serving the new certificate", "wait", wait)
			return min(next, wait), nil
		}
		r.serving.Store(&served{pair: v.pair, raw: v.leaf.Raw})
		logger.Info("Serving webhook certificate", "serial", v.leaf.SerialNumber.String(), "notAfter", v.leaf.NotAfter.UTC(), "renewAt", v.leaf.NotAfter.Add(-r.cfg.RenewBefore).UTC())
	}
	return max(next, 0), nil
}

// renew makes a certificate, adds its CA to the bundles, then writes the
// Secret unless another replica changed it since it was read.
func (r *Rotator) renew(ctx context.Context, old *corev1.Secret, v verdict, now time.Time) error {
	certPEM, keyPEM, caPEM, err := generate(r.cfg)
	if err != nil {
		return err
	}
	bundle, err := mergeBundles(now, caPEM, v.oldBundle)
	if err != nil {
		return err
	}
	// Added, never replaced: a replica renewing at the same moment may
	// have added its own CA, and the Secret decides which one stays.
	if _, err := r.keepBundles(ctx, caPEM, true); err != nil {
		return err
	}
	r.bundleAddedAt = now
	secrets := r.client.CoreV1().Secrets(r.cfg.Namespace)
	data := map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM, CAKey: bundle}
	annotations := map[string]string{AnnotationManagedBy: managedByValue, AnnotationServeAfter: now.Add(r.cfg.ActivationDelay).UTC().Format(time.RFC3339Nano)}
	if old == nil {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: r.cfg.SecretName, Namespace: r.cfg.Namespace, Annotations: annotations},
			Type:       corev1.SecretTypeTLS,
			Data:       data,
		}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating Secret %s/%s: %w", r.cfg.Namespace, r.cfg.SecretName, err)
		}
		return nil
	}
	s := old.DeepCopy()
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	for k, val := range annotations {
		s.Annotations[k] = val
	}
	s.Data = data
	_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
	switch {
	case err == nil, apierrors.IsConflict(err):
		// A conflict: another replica renewed first; its Secret wins.
		return nil
	case apierrors.IsInvalid(err):
		// A foreign Secret of a type that cannot hold a certificate
		// (the type is immutable): replace it.
		uid := old.UID
		if err := secrets.Delete(ctx, old.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("replacing foreign Secret %s/%s: %w", r.cfg.Namespace, r.cfg.SecretName, err)
		}
		return nil
	default:
		return fmt.Errorf("updating Secret %s/%s: %w", r.cfg.Namespace, r.cfg.SecretName, err)
	}
}
