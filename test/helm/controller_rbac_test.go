// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
)

// TestControllerCertificateWorksUnderTheChartsRBAC runs the controller
// with the chart's controller identity: it makes its certificate Secret,
// fills the caBundle, and may watch exactly the Secret and configuration
// it keeps in step (list and watch by name), and no other Secret.
func TestControllerCertificateWorksUnderTheChartsRBAC(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	vs := valueSet{name: "controller-rbac", release: "ctlrbac", namespace: "ctlrbac-system", values: map[string]any{
		// The pod webhook fails open outside labelled namespaces; the
		// validating one would fail closed for everybody, so it is off.
		"controller":          map[string]any{"configValidation": false},
		"deviceClasses":       map[string]any{"builtIn": false},
		"resourceSlicePolicy": false,
	}}
	objs, _, err := render(loadChart(t), vs)
	if err != nil {
		t.Fatal(err)
	}
	ensureNamespace(ctx, t, vs.namespace)
	a := newApplier(t)
	for _, o := range objs {
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("installing: %v", err)
		}
	}
	const fullname = "ctlrbac-gpufrac"
	defer func() {
		ar := cp.Client.AdmissionregistrationV1()
		_ = ar.MutatingWebhookConfigurations().Delete(context.WithoutCancel(ctx), fullname, metav1.DeleteOptions{})
		_ = ar.MutatingAdmissionPolicyBindings().Delete(context.WithoutCancel(ctx), fullname+"-packing", metav1.DeleteOptions{})
		_ = ar.MutatingAdmissionPolicies().Delete(context.WithoutCancel(ctx), fullname+"-packing", metav1.DeleteOptions{})
	}()
	client, _ := impersonate(t, "system:serviceaccount:"+vs.namespace+":"+fullname+"-controller", nil)

	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, controller.Config{Client: client, WebhookAddress: "127.0.0.1:0",
			Cert: webhookcert.Config{Namespace: vs.namespace, SecretName: fullname + "-webhook-tls", ServiceName: fullname + "-webhook",
				MutatingConfig: fullname, ActivationDelay: time.Second},
			// As the chart's --packing-parameter.
			PackingParameter: types.NamespacedName{Namespace: vs.namespace, Name: fullname + "-packing"},
			Ready:            func(addr string) { ready <- addr }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("the controller stopped under the chart's RBAC: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the controller never served")
	}
	secret, err := cp.Client.CoreV1().Secrets(vs.namespace).Get(ctx, fullname+"-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the caBundle of the pod webhooks", func() (bool, error) {
		m, err := cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, fullname, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, w := range m.Webhooks {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(w.ClientConfig.CABundle) {
				return false, nil
			}
		}
		return string(m.Webhooks[0].ClientConfig.CABundle) == string(secret.Data[webhookcert.CAKey]), nil
	})

	// The packing policy's parameter: created, and kept, under the
	// chart's rights (get, update and create on that ConfigMap only).
	poll(ctx, t, "the packing parameter", func() (bool, error) {
		_, err := cp.Client.CoreV1().ConfigMaps(vs.namespace).Get(ctx, fullname+"-packing", metav1.GetOptions{})
		return err == nil, nil
	})
	if args := strings.Join(containerArgs(t, find(objs, "Deployment", fullname+"-controller").Object), " "); !strings.Contains(args, "--packing-parameter="+fullname+"-packing") {
		t.Errorf("the chart runs the controller with %s, not the parameter this test gave it", args)
	}
	_, err = client.CoreV1().ConfigMaps(vs.namespace).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{})
	wantRefused(t, "reading another ConfigMap", err, "forbidden")

	byName := func(name string) metav1.ListOptions {
		return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
	}
	if _, err := client.CoreV1().Secrets(vs.namespace).List(ctx, byName(fullname+"-webhook-tls")); err != nil {
		t.Errorf("listing its Secret by name: %v", err)
	}
	if w, err := client.CoreV1().Secrets(vs.namespace).Watch(ctx, byName(fullname+"-webhook-tls")); err != nil {
		t.Errorf("watching its Secret by name: %v", err)
	} else {
		w.Stop()
	}
	if w, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Watch(ctx, byName(fullname)); err != nil {
		t.Errorf("watching its webhook configuration by name: %v", err)
	} else {
		w.Stop()
	}
	_, err = client.CoreV1().Secrets(vs.namespace).List(ctx, metav1.ListOptions{})
	wantRefused(t, "listing every Secret", err, "forbidden")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("stopping: %v", err)
	}
}
