// Package webhookcert gives the admission webhooks a serving certificate
// without cert-manager: a self-signed certificate for the Service's DNS
// names, kept in a Secret that the first replica creates and every replica
// reads (so replicas agree without leader election), and the CA bundle of
// the webhook configurations patched to trust it.
package webhookcert

import (
	"context"
	"crypto/tls"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/retry"
)

// Config names the objects involved.
type Config struct {
	Namespace  string
	SecretName string
	// ServiceName is the webhook Service; the certificate covers its DNS
	// names in Namespace.
	ServiceName string
	// MutatingConfig and ValidatingConfig are the webhook configurations
	// to patch; empty skips one.
	MutatingConfig, ValidatingConfig string
}

// Ensure returns the serving certificate, creating it on first use, and
// makes the webhook configurations trust it.
func Ensure(ctx context.Context, client kubernetes.Interface, cfg Config) (*tls.Certificate, error) {
	secret, err := ensureSecret(ctx, client, cfg)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s does not hold a usable certificate: %w", cfg.Namespace, cfg.SecretName, err)
	}
	bundle := secret.Data[corev1.TLSCertKey]
	if err := patchBundles(ctx, client, cfg, bundle); err != nil {
		return nil, err
	}
	return &pair, nil
}

func ensureSecret(ctx context.Context, client kubernetes.Interface, cfg Config) (*corev1.Secret, error) {
	secrets := client.CoreV1().Secrets(cfg.Namespace)
	if s, err := secrets.Get(ctx, cfg.SecretName, metav1.GetOptions{}); err == nil {
		return s, nil
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
	}
	host := cfg.ServiceName + "." + cfg.Namespace + ".svc"
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey(host, nil, []string{
		cfg.ServiceName, cfg.ServiceName + "." + cfg.Namespace, host, host + ".cluster.local",
	})
	if err != nil {
		return nil, fmt.Errorf("generating the webhook certificate: %w", err)
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: cfg.SecretName, Namespace: cfg.Namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: certPEM, corev1.TLSPrivateKeyKey: keyPEM},
	}
	created, err := secrets.Create(ctx, s, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		// Another replica won the race; use its certificate.
		return secrets.Get(ctx, cfg.SecretName, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("creating secret %s/%s: %w", cfg.Namespace, cfg.SecretName, err)
	}
	return created, nil
}

func patchBundles(ctx context.Context, client kubernetes.Interface, cfg Config, bundle []byte) error {
	mutating := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	validating := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if cfg.MutatingConfig != "" {
		err := trust(func() (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
			return mutating.Get(ctx, cfg.MutatingConfig, metav1.GetOptions{})
		}, func(c *admissionregistrationv1.MutatingWebhookConfiguration) error {
			for i := range c.Webhooks {
				c.Webhooks[i].ClientConfig.CABundle = bundle
			}
			_, err := mutating.Update(ctx, c, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("trusting the certificate in MutatingWebhookConfiguration %s: %w", cfg.MutatingConfig, err)
		}
	}
	if cfg.ValidatingConfig != "" {
		err := trust(func() (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
			return validating.Get(ctx, cfg.ValidatingConfig, metav1.GetOptions{})
		}, func(c *admissionregistrationv1.ValidatingWebhookConfiguration) error {
			for i := range c.Webhooks {
				c.Webhooks[i].ClientConfig.CABundle = bundle
			}
			_, err := validating.Update(ctx, c, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("trusting the certificate in ValidatingWebhookConfiguration %s: %w", cfg.ValidatingConfig, err)
		}
	}
	return nil
}

// trust reads a configuration and writes it back with the bundle set,
// retrying when another writer got there in between.
func trust[T any](get func() (T, error), setAndUpdate func(T) error) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj, err := get()
		if err != nil {
			return err
		}
		return setAndUpdate(obj)
	})
}
