// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// TestWebhookCertificateRenewsWithoutFailedAdmission runs two replicas of
// the real controller against the API server with a self-signed
// certificate that expires in one minute, each behind its own webhook
// (failing closed), and sends admission requests through the API server to
// both, without pause, until past the first certificate's expiry: every
// request must reach the webhook, and both replicas must have moved to a
// renewed certificate.
func TestWebhookCertificateRenewsWithoutFailedAdmission(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(e.ctx)
	configName := e.ns + "-gpufrac-cert"
	certCfg := webhookcert.Config{
		Namespace: e.ns, SecretName: "gpufrac-webhook-tls", ServiceName: "gpufrac-webhook",
		ExtraHosts: []string{"127.0.0.1"}, MutatingConfig: configName,
		Lifetime: time.Minute, RenewBefore: 35 * time.Second,
	}
	var wg sync.WaitGroup
	addrs := make([]string, 2)
	for i := range addrs {
		ready := make(chan string, 1)
		wg.Go(func() {
			err := controller.Run(ctx, controller.Config{Client: e.client, WebhookAddress: "127.0.0.1:0", Cert: certCfg,
				KAI:   kai.Options{TimeSlicingClass: "gpufrac.dev", SMSharingClass: "gpufrac.dev"},
				Ready: func(addr string) { ready <- addr }})
			if err != nil {
				t.Errorf("replica %d: %v", i, err)
			}
		})
		select {
		case addrs[i] = <-ready:
		case <-time.After(waitTimeout):
			t.Fatalf("replica %d never served", i)
		}
	}
	t.Cleanup(func() {
		_ = e.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.WithoutCancel(ctx), configName, metav1.DeleteOptions{})
		cancel()
		wg.Wait()
	})

	// One webhook per replica, told apart by a pod label; no caBundle:
	// the controllers fill it in.
	var hooks []admissionregistrationv1.MutatingWebhook
	for i, addr := range addrs {
		hooks = append(hooks, admissionregistrationv1.MutatingWebhook{
			Name:                    fmt.Sprintf("replica-%d.kai.pods.gpufrac.dev", i),
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate-pods")},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.ns}},
			ObjectSelector:    &metav1.LabelSelector{MatchLabels: map[string]string{"replica": fmt.Sprint(i)}},
		})
	}
	if _, err := e.client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx,
		&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: configName}, Webhooks: hooks}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// admit sends a pod the webhook must refuse to replica i through the
	// API server: the refusal proves the call got through TLS.
	admit := func(i int) error {
		probe := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: map[string]string{"replica": fmt.Sprint(i)}, Annotations: map[string]string{kai.AnnotationFraction: "2"}},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox"}}},
		}
		_, err := e.client.CoreV1().Pods(e.ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "cannot translate KAI GPU-sharing annotations") {
			return nil
		}
		return fmt.Errorf("replica %d: admission did not reach the webhook: %v", i, err)
	}
	// The API server picks the configuration and its caBundle up
	// asynchronously; from the first success on, nothing may fail.
	harness.Poll(ctx, t, waitTimeout, "the API server to call both webhooks", func() (bool, error) {
		return admit(0) == nil && admit(1) == nil, nil
	})
	first := servedCert(t, addrs[0])
	t.Logf("first certificate: serial %s, expires %s", first.SerialNumber, first.NotAfter.UTC())

	calls, renewed := 0, map[int]bool{}
	until := first.NotAfter.Add(5 * time.Second)
	for time.Now().Before(until) {
		for i, addr := range addrs {
			if err := admit(i); err != nil {
				t.Fatalf("after %d successful calls, at %s (first certificate expires %s): %v", calls, time.Now().UTC().Format(time.RFC3339), first.NotAfter.UTC().Format(time.RFC3339), err)
			}
			calls++
			if c := servedCert(t, addr); !c.Equal(first) && !renewed[i] {
				renewed[i] = true
				t.Logf("replica %d serves a renewed certificate (serial %s, expires %s) after %d calls", i, c.SerialNumber, c.NotAfter.UTC(), calls)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !renewed[0] || !renewed[1] {
		t.Errorf("renewed: %v; both replicas must serve a renewed certificate past the first one's expiry", renewed)
	}
	t.Logf("%d admission calls through the API server, none failed, across the renewal and past the first certificate's expiry", calls)
}

// servedCert is the certificate a replica presents now.
func servedCert(t *testing.T, addr string) *x509.Certificate {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only reading what is served
	if err != nil {
		t.Fatalf("dialing %s: %v", addr, err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0]
}
