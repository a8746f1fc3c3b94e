// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// ReasonRunsWithoutClaim is the Event on a pod the KAI webhook never saw.
const ReasonRunsWithoutClaim = "KAIPodWithoutClaim"

// reportMissedPods finds, once at start, the pods that carry KAI
// GPU-sharing annotations but no translation: the ordinary namespaces'
// webhook fails open (failurePolicy Ignore, deployments/webhooks.yaml), so
// a pod created while no controller answered was admitted as written and
// runs without a GPU claim. Each gets a Warning Event saying so; nothing
// else changes it (a running pod's claims cannot be added). Namespaces the
// webhook does not serve (kube-system, the controller's own) are skipped;
// pods in a namespace labelled gpufrac.dev/kai-translation=required could
// not be created without the webhook. It returns how many it reported.
func reportMissedPods(ctx context.Context, client kubernetes.Interface, recorder events.EventRecorder, skip []string) (int, error) {
	n := 0
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return n, fmt.Errorf("listing pods to find those admitted while the webhook was down: %w", err)
		}
		for i := range list.Items {
			p := &list.Items[i]
			if slices.Contains(skip, p.Namespace) || !kai.HasAnnotations(p.Annotations) || p.Annotations[kai.AnnotationTranslated] != "" ||
				p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
				continue
			}
			recorder.Eventf(p, nil, corev1.EventTypeWarning, ReasonRunsWithoutClaim, "Translate",
				"The pod carries KAI GPU-sharing annotations but gpufrac's webhook never saw it (gpufrac-controller was not answering when it was created): it runs without a GPU claim, so without a GPU. Delete it to have it created again through the webhook.")
			klog.FromContext(ctx).Info("Pod admitted without gpufrac's KAI translation", "pod", klog.KObj(p))
			n++
		}
		if list.Continue == "" {
			return n, nil
		}
		opts.Continue = list.Continue
	}
}
