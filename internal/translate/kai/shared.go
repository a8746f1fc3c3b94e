// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// What the translations of another scheduler's GPU requests share (KAI's
// here, HAMi's in internal/translate/hami): the container a request came from, the
// pod-level claim it gets, and the claim template named after its content.

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
