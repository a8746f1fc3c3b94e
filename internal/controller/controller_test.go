// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
)

// TestServesAdmissionOverTLS starts the controller as the binary does and
// sends it an AdmissionReview over HTTPS, trusting only the certificate it
// stored in its Secret, as the API server does through the CA bundle.
func TestServesAdmissionOverTLS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	addr, pool := serveController(ctx, t, controller.Config{})
	httpClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, ServerName: "gpufrac-webhook.gpufrac-system.svc", MinVersion: tls.VersionTLS12}}}

	pod, _ := json.Marshal(corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"gpu-memory": "oops"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main"}}}})
	body, _ := json.Marshal(admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: "u", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Operation: admissionv1.Create, Namespace: "team",
		Object: runtime.RawExtension{Raw: pod}}})
	resp, err := httpClient.Post("https://"+addr+admission.PathMutatePods, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if out.Response == nil || out.Response.Allowed || out.Response.Result.Message != `cannot translate KAI GPU-sharing annotations: annotation gpu-memory="oops": failed to parse gpu memory annotation value: must be a whole number of MiB` {
		t.Errorf("response %+v", out.Response)
	}
}

// serveController runs the controller as the binary does, over a fake
// client, with cfg's webhook settings (address, certificate, Ready and
// Client are set here), until the test ends; it returns the webhooks'
// address and the pool that trusts the certificate the controller stored
// in its Secret, as the API server does through the CA bundle.
func serveController(ctx context.Context, t *testing.T, cfg controller.Config) (string, *x509.CertPool) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	client := fake.NewClientset()
	ready := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Client, cfg.WebhookAddress = client, "127.0.0.1:0"
	cfg.Cert = webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook"}
	cfg.Ready = func(addr string) { ready <- addr }
	go func() { done <- controller.Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		done <- err
		t.Fatalf("controller stopped: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("controller never served")
	}
	secret, err := client.CoreV1().Secrets("gpufrac-system").Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data[corev1.TLSCertKey])
	return addr, pool
}
