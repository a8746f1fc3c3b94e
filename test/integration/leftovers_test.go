// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/packing/policyparam"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// TestNothingLeftBehind runs the real controller against the API server
// (issue 34 items 5 and 7): a KAI pod created while no controller ran gets
// an Event saying it runs without a claim; a template gpufrac made that no
// pod names any more is deleted after the grace period and its key leaves
// the packing parameter, while one a pod names and one gpufrac did not
// make stay; a hand edit of the parameter is put right at once.
func TestNothingLeftBehind(t *testing.T) {
	e := newEnv(t)
	class := e.classFor("gc", "")
	labelled := func(name string) string {
		tmpl := claimTemplate(name, class, "8Gi", 1, "")
		tmpl.Labels = map[string]string{translated.LabelManagedBy: translated.ManagedByValue}
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return name
	}
	used, orphan := labelled("gpufrac-kai-used"), labelled("gpufrac-kai-orphan")
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, claimTemplate("users-own", class, "8Gi", 1, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	holder := kaiPod("holder", "", nil)
	holder.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(used)}}
	holder.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	orphanPod := kaiPod("orphan-holder", "", nil)
	orphanPod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(orphan)}}
	orphanPod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	// No webhook serves this namespace: the KAI pod goes in as written,
	// as with the controller down and failurePolicy Ignore.
	for _, p := range []*v1.Pod{holder, orphanPod, kaiPod("missed", "", map[string]string{kai.AnnotationFraction: "0.5"})} {
		if _, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	param := types.NamespacedName{Namespace: e.ns, Name: "gpufrac-packing"}
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		done <- controller.Run(ctx, controller.Config{Client: e.client, WebhookAddress: "127.0.0.1:0",
			// The controller's own namespace is not the test's: it skips
			// its own namespace when it looks for pods the webhook missed.
			Cert:             webhookcert.Config{Namespace: metav1.NamespaceDefault, SecretName: e.ns + "-webhook-tls", ServiceName: "gpufrac-webhook", ExtraHosts: []string{"127.0.0.1"}},
			KAI:              kai.Options{TimeSlicingClass: class, SMSharingClass: class},
			PackingParameter: param, TemplateGCGrace: 2 * time.Second,
			Ready: func(addr string) { ready <- addr }})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("controller stopped: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("the controller never served")
	}

	e.poll("a "+controller.ReasonRunsWithoutClaim+" Event on the pod the webhook never saw", func() (bool, error) {
		evs, err := e.client.EventsV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range evs.Items {
			if ev.Reason == controller.ReasonRunsWithoutClaim && ev.Regarding.Name == "missed" {
				return true, nil
			}
		}
		return false, nil
	})
	keys := func() map[string]string {
		cm, err := e.client.CoreV1().ConfigMaps(e.ns).Get(e.ctx, param.Name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		return cm.Data
	}
	has := func(name string) bool { _, ok := keys()[policyparam.Key(e.ns, name)]; return ok }
	e.poll("the parameter listing the three templates", func() (bool, error) { return has(used) && has(orphan) && has("users-own"), nil })

	// A hand edit with nothing else changing is put right at once.
	cm, err := e.client.CoreV1().ConfigMaps(e.ns).Get(e.ctx, param.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"kube-system.planted": ""}
	if _, err := e.client.CoreV1().ConfigMaps(e.ns).Update(e.ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.poll("the edited parameter put right", func() (bool, error) { return has(used) && !has("planted") && len(keys()) == 3, nil })
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the hand edit lasted %s", took)
	}

	// The orphan's pod goes: after the grace period its template goes,
	// and so does its key.
	if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, "orphan-holder", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	e.poll("the unused template deleted", func() (bool, error) {
		_, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Get(e.ctx, orphan, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	e.poll("its key gone from the parameter", func() (bool, error) { return !has(orphan) && has(used), nil })
	// Past several grace periods, the named one and the user's own stay.
	time.Sleep(5 * time.Second)
	for _, name := range []string{used, "users-own"} {
		if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Get(e.ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("template %s: %v", name, err)
		}
	}
}
