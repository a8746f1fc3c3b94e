// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// Webhook is gpufrac-controller's admission server running against the
// control plane.
type Webhook struct {
	stop func() error
}

// Stop ends the server and removes its webhook configuration.
func (w *Webhook) Stop() error { return w.stop() }

// StartWebhook runs gpufrac-controller's admission server (internal/controller,
// in this process) behind TLS on loopback and registers its pod webhook for
// namespace alone, failing closed, as the reference configuration does for
// migrated namespaces. It returns once the API server calls the webhook.
func (cp *ControlPlane) StartWebhook(ctx context.Context, namespace string, opts kai.Options) (*Webhook, error) {
	return cp.startWebhook(ctx, namespace, opts, false, "")
}

// StartHAMiWebhook is StartWebhook for a namespace opted in to HAMi
// translation: after the KAI webhook, the reference configuration's
// hami.pods.gpufrac.dev (deployments/webhooks.yaml: its objectSelector and
// matchConditions as shipped), pointed at this server and namespace.
func (cp *ControlPlane) StartHAMiWebhook(ctx context.Context, namespace string, opts kai.Options) (*Webhook, error) {
	return cp.startWebhook(ctx, namespace, opts, true, "")
}

// StartHAMiWebhookWithMetrics is StartHAMiWebhook that also serves the
// controller's metrics (the pools' fragmentation, the slices' ignored
// sizes) on metricsAddress's /metrics, as gpufrac-controller's
// --metrics-address does: make demo's Prometheus scrapes them for the
// dashboard's controller panels.
func (cp *ControlPlane) StartHAMiWebhookWithMetrics(ctx context.Context, namespace string, opts kai.Options, metricsAddress string) (*Webhook, error) {
	return cp.startWebhook(ctx, namespace, opts, true, metricsAddress)
}

func (cp *ControlPlane) startWebhook(ctx context.Context, namespace string, opts kai.Options, withHAMi bool, metricsAddress string) (_ *Webhook, finalErr error) {
	dir, certPEM, err := loopbackCertDir(cp.Dir, "webhook-")
	if err != nil {
		return nil, err
	}
	client, err := cp.controllerClient()
	if err != nil {
		return nil, err
	}
	cfg := controller.Config{
		Client: client, WebhookAddress: "127.0.0.1:0", CertDir: dir, KAI: opts,
		MetricsAddress: metricsAddress,
	}
	if metricsAddress != "" {
		// A registry of the controller's own collectors alone: this
		// process's Go and process figures are the test's, not its.
		cfg.Metrics = prometheus.NewRegistry()
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan string, 1)
	done := make(chan error, 1)
	cfg.Ready = func(addr string) { ready <- addr }
	go func() { done <- controller.Run(runCtx, cfg) }()
	name := namespace + "-gpufrac-kai"
	w := &Webhook{stop: func() error {
		_ = cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), name, metav1.DeleteOptions{})
		cancel()
		return <-done
	}}
	defer func() {
		if finalErr != nil {
			_ = w.Stop()
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		return nil, fmt.Errorf("gpufrac-controller stopped: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "kai.pods.gpufrac.dev",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate-pods"), CABundle: certPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace}},
		}},
	}
	if withHAMi {
		h, err := referenceWebhook("hami.pods.gpufrac.dev")
		if err != nil {
			return nil, err
		}
		h.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate-pods-hami"), CABundle: certPEM}
		h.NamespaceSelector = mwc.Webhooks[0].NamespaceSelector
		mwc.Webhooks = append(mwc.Webhooks, h)
	}
	if _, err := cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registering the webhook: %w", err)
	}
	// The API server picks configurations up asynchronously: wait until a
	// dry run of an untranslatable pod is refused by the webhook.
	probe := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-webhook-probe", Annotations: map[string]string{kai.AnnotationFraction: "2"}},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox"}}},
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "cannot translate KAI GPU-sharing annotations"), nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the API server to call the webhook: %w", err)
	}
	if withHAMi {
		probe := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-hami-webhook-probe"},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox", Resources: v1.ResourceRequirements{
				Limits: v1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem-percentage": resource.MustParse("101")}}}}},
		}
		err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cp.Client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return err != nil && strings.Contains(err.Error(), "cannot translate HAMi GPU resources"), nil
		})
		if err != nil {
			return nil, fmt.Errorf("waiting for the API server to call the HAMi webhook: %w", err)
		}
	}
	return w, nil
}

// referenceWebhook is the named pod webhook of deployments/webhooks.yaml.
func referenceWebhook(name string) (admissionregistrationv1.MutatingWebhook, error) {
	for doc, err := range yamldocs.All([]byte(deployments.Webhooks)) {
		if err != nil {
			return admissionregistrationv1.MutatingWebhook{}, fmt.Errorf("deployments/webhooks.yaml: %w", err)
		}
		var c admissionregistrationv1.MutatingWebhookConfiguration
		if err := yaml.Unmarshal(doc, &c); err != nil || c.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		for _, w := range c.Webhooks {
			if w.Name == name {
				return w, nil
			}
		}
	}
	return admissionregistrationv1.MutatingWebhook{}, fmt.Errorf("deployments/webhooks.yaml has no pod webhook %s", name)
}

// loopbackCertDir writes a self-signed serving certificate for 127.0.0.1
// into a new directory under parent (tls.crt, tls.key, as --cert-dir
// reads them) and returns the directory and the certificate, which is its
// own CA bundle.
func loopbackCertDir(parent, prefix string) (string, []byte, error) {
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		return "", nil, fmt.Errorf("making the webhook certificate: %w", err)
	}
	dir, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return "", nil, err
	}
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return "", nil, err
		}
	}
	return dir, certPEM, nil
}
