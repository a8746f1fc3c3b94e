// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package webhookcert

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// keepBundles makes every webhook of the configurations trust bundle:
// with add, bundle is added to what they trust (expired certificates
// dropped); without, they trust exactly bundle. It reports whether a
// certificate was added anywhere. A configuration that does not exist is
// skipped: it may be switched off.
func (r *Rotator) keepBundles(ctx context.Context, bundle []byte, add bool) (bool, error) {
	now := r.now()
	desired := func(cur []byte) ([]byte, bool, error) {
		want := bundle
		if add {
			var err error
			if want, err = mergeBundles(now, cur, bundle); err != nil {
				// An unparsable bundle is replaced.
				want = bundle
			}
		}
		if sameCerts(cur, want) {
			return cur, false, nil
		}
		return want, !subset(want, cur), nil
	}
	api := r.client.AdmissionregistrationV1()
	holders := []struct {
		kind, name string
		keep       func(name string) (bool, error)
	}{
		{"MutatingWebhookConfiguration", r.cfg.MutatingConfig, func(name string) (bool, error) {
			return keepIn(ctx, api.MutatingWebhookConfigurations(), name, desired, mutatingClients)
		}},
		{"ValidatingWebhookConfiguration", r.cfg.ValidatingConfig, func(name string) (bool, error) {
			return keepIn(ctx, api.ValidatingWebhookConfigurations(), name, desired, validatingClients)
		}},
	}
	added := false
	for _, h := range holders {
		if h.name == "" {
			continue
		}
		grew, err := h.keep(h.name)
		added = added || grew
		if err := skipMissing(ctx, h.kind, h.name, err); err != nil {
			return added, err
		}
	}
	return added, nil
}

// webhookConfigs is the typed client of one kind of webhook configuration.
type webhookConfigs[C any] interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*C, error)
	Update(ctx context.Context, c *C, opts metav1.UpdateOptions) (*C, error)
}

// keepIn gives the webhooks of configuration name the bundles desired
// makes of theirs (setBundles), retrying on conflict, and reports whether
// one gained a CA.
func keepIn[C any](ctx context.Context, api webhookConfigs[C], name string, desired func([]byte) ([]byte, bool, error),
	configs func(*C) []*admissionregistrationv1.WebhookClientConfig) (bool, error) {
	added := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		c, err := api.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		changed, grew, err := setBundles(configs(c), desired)
		if err != nil {
			return err
		}
		added = added || grew
		if !changed {
			return nil
		}
		_, err = api.Update(ctx, c, metav1.UpdateOptions{})
		return err
	})
	return added, err
}

// clientConfigs points at the client config of each webhook.
func clientConfigs[W any](webhooks []W, config func(*W) *admissionregistrationv1.WebhookClientConfig) []*admissionregistrationv1.WebhookClientConfig {
	out := make([]*admissionregistrationv1.WebhookClientConfig, len(webhooks))
	for i := range webhooks {
		out[i] = config(&webhooks[i])
	}
	return out
}

func mutatingClients(c *admissionregistrationv1.MutatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
	return clientConfigs(c.Webhooks, func(w *admissionregistrationv1.MutatingWebhook) *admissionregistrationv1.WebhookClientConfig {
		return &w.ClientConfig
	})
}

func validatingClients(c *admissionregistrationv1.ValidatingWebhookConfiguration) []*admissionregistrationv1.WebhookClientConfig {
	return clientConfigs(c.Webhooks, func(w *admissionregistrationv1.ValidatingWebhook) *admissionregistrationv1.WebhookClientConfig {
		return &w.ClientConfig
	})
}

// subset tells whether every certificate of bundle a is in bundle b.
func subset(a, b []byte) bool {
	ca, errA := cert.ParseCertsPEM(a)
	cb, _ := cert.ParseCertsPEM(b)
	if errA != nil {
		return false
	}
	in := map[string]bool{}
	for _, c := range cb {
		in[string(c.Raw)] = true
	}
	for _, c := range ca {
		if !in[string(c.Raw)] {
			return false
		}
	}
	return true
}

func skipMissing(ctx context.Context, kind, name string, err error) error {
	switch {
	case err == nil:
		return nil
	case apierrors.IsNotFound(err):
		klog.FromContext(ctx).V(2).Info("Webhook configuration not found; not keeping its caBundle", "kind", kind, "name", name)
		return nil
	default:
		return fmt.Errorf("keeping the caBundle of %s %s: %w", kind, name, err)
	}
}

// setBundles gives each webhook client config the CA bundle desired makes of
// its current one; changed says whether any differs now, grew whether any
// gained a CA it did not trust before.
func setBundles(configs []*admissionregistrationv1.WebhookClientConfig, desired func([]byte) ([]byte, bool, error)) (changed, grew bool, err error) {
	for _, cc := range configs {
		want, g, err := desired(cc.CABundle)
		if err != nil {
			return changed, grew, err
		}
		if string(want) != string(cc.CABundle) {
			cc.CABundle, changed, grew = want, true, grew || g
		}
	}
	return changed, grew, nil
}
