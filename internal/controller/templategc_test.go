// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

func managedTemplate(ns, name string, created time.Time) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name),
		CreationTimestamp: metav1.NewTime(created), Labels: map[string]string{translated.LabelManagedBy: translated.ManagedByValue}}}
}

func podNaming(ns, name, template string, translated bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
	if translated {
		p.Labels = map[string]string{kai.LabelTranslated: "true"}
	}
	return p
}

// TestTemplateGC: a template gpufrac made is deleted once no pod has named
// it for the grace period, not before; one a pod names stays, even a pod
// the cache does not hold (no translated label); one without gpufrac's
// label is never touched.
func TestTemplateGC(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	old := start.Add(-time.Hour)
	used, orphan, byHand := managedTemplate("team", "used", old), managedTemplate("team", "orphan", old), managedTemplate("team", "by-hand", old)
	// Seen unused from the first sweep on, but younger than the grace.
	fresh := managedTemplate("team", "fresh", start.Add(5*time.Minute))
	foreign := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "foreign", CreationTimestamp: metav1.NewTime(old)}}
	translatedPod, handPod := podNaming("team", "p", "used", true), podNaming("team", "q", "by-hand", false)
	client := fake.NewClientset(used, orphan, byHand, fresh, foreign, translatedPod, handPod)
	tmplIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	podIdx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// The caches hold what the loop's informers select: gpufrac's
	// templates and translated pods.
	for _, o := range []*resourceapi.ResourceClaimTemplate{used, orphan, byHand, fresh} {
		_ = tmplIdx.Add(o)
	}
	_ = podIdx.Add(translatedPod)
	loop := &templateLoop{templates: resourcelisters.NewResourceClaimTemplateLister(tmplIdx), pods: corelisters.NewPodLister(podIdx)}
	now := start
	gc := newTemplateGC(client, loop, 10*time.Minute)
	gc.now = func() time.Time { return now }

	exists := func(name string) bool {
		_, err := client.ResourceV1().ResourceClaimTemplates("team").Get(ctx, name, metav1.GetOptions{})
		return !apierrors.IsNotFound(err)
	}
	sweep := func() {
		t.Helper()
		if err := gc.sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	sweep()
	now = start.Add(9 * time.Minute)
	sweep()
	if !exists("orphan") {
		t.Fatal("deleted within the grace period")
	}
	now = start.Add(10 * time.Minute)
	sweep()
	for name, want := range map[string]bool{"orphan": false, "used": true, "by-hand": true, "fresh": true, "foreign": true} {
		if got := exists(name); got != want {
			t.Errorf("template %s exists: %v, want %v", name, got, want)
		}
	}
	// The fresh one, unused since the first sweep and now grace old, goes.
	now = start.Add(15 * time.Minute)
	sweep()
	if exists("fresh") {
		t.Error("a template unused for the grace period and as old stays")
	}
}

// TestReportMissedPods: a KAI-annotated pod the webhook never translated
// gets a Warning Event; a translated one, one without KAI annotations, a
// finished one and one in a skipped namespace get none.
func TestReportMissedPods(t *testing.T) {
	pod := func(ns, name string, ann map[string]string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann}, Status: corev1.PodStatus{Phase: phase}}
	}
	frac := map[string]string{kai.AnnotationFraction: "0.5"}
	client := fake.NewClientset(
		pod("team", "missed", frac, corev1.PodRunning),
		pod("team", "translated", map[string]string{kai.AnnotationFraction: "0.5", kai.AnnotationTranslated: "gpufrac-kai-1"}, corev1.PodRunning),
		pod("team", "plain", nil, corev1.PodRunning),
		pod("team", "done", frac, corev1.PodSucceeded),
		pod("kube-system", "system", frac, corev1.PodRunning),
	)
	rec := events.NewFakeRecorder(10)
	n, err := reportMissedPods(context.Background(), client, rec, []string{"kube-system", "gpufrac-system"})
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("reported %d pods, want 1", n)
	}
	select {
	case e := <-rec.Events:
		if want := "Warning " + ReasonRunsWithoutClaim + " The pod carries KAI GPU-sharing annotations"; len(e) < len(want) || e[:len(want)] != want {
			t.Errorf("event %q, want it to start with %q", e, want)
		}
	default:
		t.Error("no Event")
	}
}
