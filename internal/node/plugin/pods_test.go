// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/plan"
)

func TestPodLookupAnswersFromTheWatchOnlyWhatItCanProve(t *testing.T) {
	direct := &corev1.Pod{ // names its claim in the spec
		ObjectMeta: metav1.ObjectMeta{Name: "direct", Namespace: "ns", UID: "u-direct"},
		Spec: corev1.PodSpec{NodeName: "node", ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-direct")}},
			Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
	}
	templated := &corev1.Pod{ // its claim is named in the status, not yet written
		ObjectMeta: metav1.ObjectMeta{Name: "templated", Namespace: "ns", UID: "u-templated"},
		Spec: corev1.PodSpec{NodeName: "node", ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}},
			Containers: []corev1.Container{{Name: "a", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
	}
	client := fake.NewClientset(direct, templated)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := newPodLookup(ctx, client, "node")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return l.synced.Load(), nil
	}); err != nil {
		t.Fatalf("the pod watch never synced: %v", err)
	}
	claim := func(name string) *resourceapi.ResourceClaim {
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	}
	ref := func(name string, uid types.UID) resourceapi.ResourceClaimConsumerReference {
		return resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: name, UID: uid}
	}
	gets := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetVerb() == "get" && a.GetResource().Resource == "pods" {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		name    string
		claim   string
		ref     resourceapi.ResourceClaimConsumerReference
		wantGET bool
	}{
		{"the cached pod names the claim", "claim-direct", ref("direct", "u-direct"), false},
		{"a pod recreated under the same name", "claim-direct", ref("direct", "u-other"), true},
		{"a template's claim the cached status does not name yet", "templated-gpu-abc", ref("templated", "u-templated"), true},
		{"a pod the watch has not delivered", "claim-x", ref("missing", "u-missing"), true},
	} {
		before := gets()
		_, _ = l.Get(ctx, claim(tc.claim), tc.ref)
		if got := gets() > before; got != tc.wantGET {
			t.Errorf("%s: GET made %v, want %v", tc.name, got, tc.wantGET)
		}
	}
}

func TestTrimPodKeepsWhatTheGuaranteeCheckReads(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	uses := corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u", Annotations: map[string]string{"big": "x"}},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}},
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always, Resources: uses, Image: "i"}, {Name: "init", Resources: uses}},
			Containers:     []corev1.Container{{Name: "main", Resources: uses, Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}},
		},
		Status: corev1.PodStatus{ResourceClaimStatuses: []corev1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To("p-gpu-1")}}},
	}
	got, err := trimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := got.(*corev1.Pod)
	if want, have := plan.ClaimHolders(pod, "gpu"), plan.ClaimHolders(trimmed, "gpu"); !slices.Equal(want, have) {
		t.Errorf("holders after trimming %v, before %v", have, want)
	}
	if !namesClaim(trimmed, "p-gpu-1") || trimmed.UID != "u" {
		t.Errorf("trimmed pod lost its claim's name or UID: %+v", trimmed)
	}
	if trimmed.Annotations != nil || trimmed.Spec.Containers[0].Env != nil {
		t.Errorf("trimmed pod keeps what nothing reads: %+v", trimmed)
	}
}
