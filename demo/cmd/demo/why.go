// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// explainTooLarge applies demo/too-large.yaml after the other pods run,
// waits for the scheduler to give up on it, shows the scheduler's own
// generic message and then `kubectl gpufrac why` for it and for pod llm.
func explainTooLarge(ctx context.Context, client kubernetes.Interface, root, kubeconfig string, kubectl func(args ...string) *exec.Cmd) error {
	step("A pod too large for any GPU: what the scheduler says, and what kubectl gpufrac why says")
	if err := kubectl("apply", "--namespace=default", "-f", filepath.Join(root, "demo", "too-large.yaml")).Run(); err != nil {
		return fmt.Errorf("kubectl apply too-large.yaml: %w", err)
	}
	var msg string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pod, err := client.CoreV1().Pods("default").Get(ctx, "too-large", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Reason == v1.PodReasonUnschedulable {
				msg = c.Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for pod too-large to be unschedulable: %w", err)
	}
	fmt.Printf("    the scheduler: %s\n\n", msg)
	for _, pod := range []string{"too-large", "llm"} {
		fmt.Printf("$ kubectl gpufrac why %s\n", pod)
		why := exec.CommandContext(ctx, filepath.Join(root, "bin", "kubectl-gpufrac"), "why", pod, "--namespace=default", "--kubeconfig="+kubeconfig)
		why.Stdout, why.Stderr = os.Stdout, os.Stderr
		if err := why.Run(); err != nil {
			return fmt.Errorf("kubectl gpufrac why %s: %w", pod, err)
		}
		fmt.Println()
	}
	// The too-large pod is the demo's point, not a failure: remove it so
	// that -wait leaves only pods that run.
	return client.CoreV1().Pods("default").Delete(ctx, "too-large", metav1.DeleteOptions{})
}
