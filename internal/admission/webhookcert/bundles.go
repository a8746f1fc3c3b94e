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
	added := false
	if name := r.cfg.MutatingConfig; name != "" {
		api := r.client.AdmissionregistrationV1().MutatingWebhookConfigurations()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			configs := make([]*admissionregistrationv1.WebhookClientConfig, len(c.Webhooks))
			for i := range c.Webhooks {
				configs[i] = &c.Webhooks[i].ClientConfig
			}
			changed, grew, err := setBundles(configs, desired)
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
		if err := skipMissing(ctx, "MutatingWebhookConfiguration", name, err); err != nil {
			return added, err
		}
	}
	if name := r.cfg.ValidatingConfig; name != "" {
		api := r.client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			c, err := api.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			configs := make([]*admissionregistrationv1.WebhookClientConfig, len(c.Webhooks))
			for i := range c.Webhooks {
				configs[i] = &c.Webhooks[i].ClientConfig
			}
			changed, grew, err := setBundles(configs, desired)
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
		if err := skipMissing(ctx, "ValidatingWebhookConfiguration", name, err); err != nil {
			return added, err
		}
	}
	return added, nil
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
