package webhookcert_test

import (
	"bytes"
	"crypto/x509"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpufrac/gpufrac/pkg/webhookcert"
)

func TestReplicasShareOneCertificateAndBundle(t *testing.T) {
	client := fake.NewClientset(
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "m"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "pods.gpufrac.dev"}}},
		&admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "v"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "a.gpufrac.dev"}, {Name: "b.gpufrac.dev"}}},
	)
	cfg := webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook", MutatingConfig: "m", ValidatingConfig: "v"}
	first, err := webhookcert.Ensure(t.Context(), client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	second, err := webhookcert.Ensure(t.Context(), client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Certificate[0], second.Certificate[0]) {
		t.Error("a second replica made its own certificate")
	}
	leaf, err := x509.ParseCertificate(first.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("gpufrac-webhook.gpufrac-system.svc"); err != nil {
		t.Errorf("certificate does not cover the Service: %v", err)
	}
	m, _ := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(t.Context(), "m", metav1.GetOptions{})
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(t.Context(), "v", metav1.GetOptions{})
	pool := x509.NewCertPool()
	for _, b := range [][]byte{m.Webhooks[0].ClientConfig.CABundle, v.Webhooks[0].ClientConfig.CABundle, v.Webhooks[1].ClientConfig.CABundle} {
		if !pool.AppendCertsFromPEM(b) {
			t.Fatal("a webhook's CA bundle is not a PEM certificate")
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "gpufrac-webhook.gpufrac-system.svc"}); err != nil {
		t.Errorf("the API server would not trust the serving certificate: %v", err)
	}
}
