// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// TestLoopCreatesTheTemplateThePodNames: the template of a translated pod
// is created by the controller's loop from the pod in the API server, equal
// to what the webhook computed at admission, although the cluster's GPUs
// changed in between; a pod whose annotations do not give the template it
// names gets none.
func TestLoopCreatesTheTemplateThePodNames(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	// Admission saw an 80Gi and a 141Gi GPU; the cluster now has neither.
	res, err := kai.Translate(kaiPod("llm"), kai.Options{GPUMemorySizes: []resource.Quantity{resource.MustParse("81408Mi"), resource.MustParse("141Gi")}})
	if err != nil {
		t.Fatal(err)
	}
	forged := res.Pod.DeepCopy()
	forged.Name = "forged"
	forged.Annotations[kai.AnnotationTranslated] = "gpufrac-kai-000000000000"
	client := fake.NewClientset(res.Pod, forged)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, controller.Config{
			Client: client, WebhookAddress: "127.0.0.1:0",
			Cert: webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook"},
		})
	}()
	var got *corev1.ObjectReference
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		tmpl, err := client.ResourceV1().ResourceClaimTemplates("team").Get(ctx, res.Template.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = &corev1.ObjectReference{Name: tmpl.Name}
		if tmpl.Labels[translated.LabelManagedBy] != translated.ManagedByValue || len(tmpl.Spec.Spec.Devices.Requests[0].FirstAvailable) != 2 {
			t.Errorf("template %+v", tmpl)
		}
		return true, nil
	})
	if err != nil || got == nil {
		t.Fatalf("the loop did not create %s: %v", res.Template.Name, err)
	}
	tmpls, _ := client.ResourceV1().ResourceClaimTemplates("team").List(ctx, metav1.ListOptions{})
	if len(tmpls.Items) != 1 {
		t.Errorf("%d templates, want only the one the real pod names", len(tmpls.Items))
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
}
