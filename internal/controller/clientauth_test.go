// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/clientauth"
	"github.com/gpufrac/gpufrac/internal/clientauth/clientauthtest"
	"github.com/gpufrac/gpufrac/internal/controller"
)

// TestWebhooksAcceptOnlyTheAPIServersCertificate: the controller started
// with a client CA (as --client-ca-file does) answers a caller presenting
// the certificate the API server would and cuts every other caller off in
// the TLS handshake; a CA file that cannot be used stops it at start.
func TestWebhooksAcceptOnlyTheAPIServersCertificate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ca := clientauthtest.NewCA(t, "apiserver-client-ca")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("an unusable CA file stops the start", func(t *testing.T) {
		err := controller.Run(ctx, controller.Config{
			Client: fake.NewClientset(), WebhookAddress: "127.0.0.1:0",
			Cert:       webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook"},
			ClientAuth: clientauth.Config{CAFile: filepath.Join(t.TempDir(), "absent")},
		})
		if err == nil || !strings.Contains(err.Error(), "client CA file") {
			t.Errorf("Run: %v, want a client CA file error", err)
		}
	})

	addr, roots := serveController(ctx, t, controller.Config{ClientAuth: clientauth.Config{CAFile: caFile, Names: []string{"kube-apiserver"}}})
	post := func(certs ...tls.Certificate) (int, error) {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: roots, ServerName: "gpufrac-webhook.gpufrac-system.svc", MinVersion: tls.VersionTLS12, Certificates: certs}}}
		resp, err := c.Post("https://"+addr+admission.PathMutatePods, "application/json", strings.NewReader("{}"))
		if err != nil {
			return 0, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode, nil
	}
	if code, err := post(ca.Client(t, "kube-apiserver")); err != nil || code == 0 {
		t.Errorf("the API server's certificate: %d, %v; want an answer", code, err)
	}
	for name, certs := range map[string][]tls.Certificate{
		"no certificate":      nil,
		"another name":        {ca.Client(t, "system:anonymous")},
		"another CA's client": {clientauthtest.NewCA(t, "other").Client(t, "kube-apiserver")},
	} {
		if code, err := post(certs...); err == nil {
			t.Errorf("%s: answered %d, want the handshake refused", name, code)
		}
	}
}
