// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package translated is what every translation of another scheduler's GPU
// requests into gpufrac claims shares, whichever scheduler's language the
// request came in (KAI's annotations in internal/translate/kai, HAMi's
// resources in internal/translate/hami): the container a request came
// from, the pod-level claim it gets and the claim template named after its
// content, the NVIDIA variables a container with a gpufrac claim may not
// set, what the API server allocates for a memory request, and the rows
// that set the other scheduler's handling of a pod beside gpufrac's.
//
// It sits beside the two translations rather than above them: no package
// imports one in a folder above its own (test/deps).
package translated

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LabelManagedBy marks the templates a translation made.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// ManagedByValue is the value of LabelManagedBy.
const ManagedByValue = "gpufrac-controller"

// EachContainer calls f with each init container, then each app container
// of pod, in order.
func EachContainer(pod *corev1.Pod, f func(*corev1.Container)) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			f(&list[i])
		}
	}
}

// ForContainer calls f with the pod's init or app container named name.
func ForContainer(pod *corev1.Pod, name string, f func(*corev1.Container)) {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				f(&list[i])
				return
			}
		}
	}
}

// PodClaimName is the pod-level claim name for a translated container,
// prefix and the container's name: readable when it fits a DNS label,
// hashed when the container's name is too long.
func PodClaimName(prefix, container string) string {
	name := prefix + container
	if len(name) <= 63 {
		return name
	}
	return prefix + shortHash([]byte(container), 16)
}

// ClaimTemplate is the template of spec in namespace, named prefix and a
// hash of spec, so that pods asking the same share one template, and
// labelled as the translation's.
func ClaimTemplate(prefix, namespace string, spec resourceapi.ResourceClaimSpec) (*resourceapi.ResourceClaimTemplate, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("hashing a claim template: %w", err)
	}
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      prefix + shortHash(raw, 12),
			Namespace: namespace,
			Labels:    map[string]string{LabelManagedBy: ManagedByValue},
		},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: spec},
	}, nil
}

func shortHash(data []byte, n int) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:n]
}

// Allocated is what the API server allocates for a memory request of q on
// a gpufrac GPU whose request policy allows minQ to any size in steps of
// step: a request up to minQ gets minQ, a larger one is rounded up to the
// step counted from minQ (k8s.io/api resource/v1
// CapacityRequestPolicyRange; the allocator's roundUpRange). gpufrac's
// slices publish a minimum that is a multiple of the step
// (pkg/domain.MemoryMin), so counting from zero gives the same figure.
func Allocated(q, minQ, step resource.Quantity) resource.Quantity {
	v, lo, s := q.Value(), minQ.Value(), step.Value()
	if v <= lo {
		return *resource.NewQuantity(lo, resource.BinarySI)
	}
	if s > 0 && (v-lo)%s != 0 {
		v = lo + ((v-lo)/s+1)*s
	}
	return *resource.NewQuantity(v, resource.BinarySI)
}
