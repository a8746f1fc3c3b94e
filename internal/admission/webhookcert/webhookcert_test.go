// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package webhookcert_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
)

const svcHost = "gpufrac-webhook.gpufrac-system.svc"

func newClient() *fake.Clientset {
	return optimistic(fake.NewClientset(
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.gpufrac.dev"}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "v"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a.gpufrac.dev"}, {Name: "b.gpufrac.dev"}}},
	))
}

func config() webhookcert.Config {
	return webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook",
		MutatingConfig: "m", ValidatingConfig: "v", ActivationDelay: 50 * time.Millisecond}
}

// start runs a replica until the test ends and waits for its certificate.
func start(t *testing.T, client *fake.Clientset, cfg webhookcert.Config) *webhookcert.Rotator {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	r, err := webhookcert.New(client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		return r.Ready() == nil, nil
	}); err != nil {
		t.Fatalf("no certificate: %v", err)
	}
	return r
}

func served(t *testing.T, r *webhookcert.Rotator) *x509.Certificate {
	t.Helper()
	pair, err := r.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

// trusted fails unless every webhook's caBundle verifies leaf for the
// Service, as the API server does.
func trusted(t *testing.T, client *fake.Clientset, leaf *x509.Certificate) {
	t.Helper()
	m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "m", metav1.GetOptions{})
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), "v", metav1.GetOptions{})
	for i, b := range [][]byte{m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[1].ClientConfig.CABundle} {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			t.Fatalf("webhook %d: the caBundle is not a PEM certificate", i)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: svcHost}); err != nil {
			t.Errorf("webhook %d: the API server would not trust the served certificate: %v", i, err)
		}
	}
}

func TestReplicasShareOneCertificateAndBundle(t *testing.T) {
	client := newClient()
	first := start(t, client, config())
	second := start(t, client, config())
	a, b := served(t, first), served(t, second)
	if !a.Equal(b) {
		t.Error("a second replica serves its own certificate")
	}
	if err := a.VerifyHostname(svcHost); err != nil {
		t.Errorf("certificate does not cover the Service: %v", err)
	}
	if life := time.Until(a.NotAfter); life < 364*24*time.Hour {
		t.Errorf("a default certificate lives %s, want a year", life)
	}
	trusted(t, client, a)
}

func TestForeignOrInvalidSecretIsReplaced(t *testing.T) {
	for name, secret := range map[string]*corev1.Secret{
		"foreign": {Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("x")}},
		"invalid": {Type: corev1.SecretTypeTLS, Data: map[string][]byte{corev1.TLSCertKey: []byte("garbage"), corev1.TLSPrivateKeyKey: []byte("garbage")}},
	} {
		t.Run(name, func(t *testing.T) {
			secret.ObjectMeta = metav1.ObjectMeta{Name: "tls", Namespace: "gpufrac-system"}
			if name == "invalid" {
				secret.Annotations = map[string]string{webhookcert.AnnotationManagedBy: "gpufrac-controller"}
			}
			client := newClient()
			if _, err := client.CoreV1().Secrets("gpufrac-system").Create(t.Context(), secret, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			r := start(t, client, config())
			trusted(t, client, served(t, r))
			s, _ := client.CoreV1().Secrets("gpufrac-system").Get(t.Context(), "tls", metav1.GetOptions{})
			if s.Annotations[webhookcert.AnnotationManagedBy] != "gpufrac-controller" || len(s.Data[webhookcert.CAKey]) == 0 {
				t.Errorf("the Secret was not replaced: %v", s.Annotations)
			}
		})
	}
}

// TestRenewalKeepsTheOldCertificateTrusted: two replicas, a short
// lifetime; across renewals every certificate either replica serves is
// trusted by every bundle, and the certificates do change.
func TestRenewalKeepsTheOldCertificateTrusted(t *testing.T) {
	client := newClient()
	cfg := config()
	cfg.Lifetime, cfg.RenewBefore, cfg.Resync = 8*time.Second, 4*time.Second, 100*time.Millisecond
	replicas := []*webhookcert.Rotator{start(t, client, cfg), start(t, client, cfg)}
	first := served(t, replicas[0])
	deadline := first.NotAfter.Add(time.Second)
	serials := map[string]bool{}
	for time.Now().Before(deadline) {
		for _, r := range replicas {
			leaf := served(t, r)
			serials[leaf.SerialNumber.String()] = true
			if time.Now().After(leaf.NotAfter) {
				t.Fatalf("a replica serves an expired certificate (notAfter %s)", leaf.NotAfter)
			}
			trusted(t, client, leaf)
		}
		if t.Failed() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(serials) < 2 {
		t.Errorf("served %d certificates past the first one's expiry, want renewals", len(serials))
	}
}

func TestConfigRefusesRenewalLongerThanLifetime(t *testing.T) {
	cfg := config()
	cfg.Lifetime, cfg.RenewBefore = time.Hour, 2*time.Hour
	if _, err := webhookcert.New(newClient(), cfg); err == nil || !strings.Contains(err.Error(), "renew-before 2h0m0s must be shorter than the lifetime 1h0m0s") {
		t.Errorf("got %v", err)
	}
}
