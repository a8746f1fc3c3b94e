// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// What the integration and end-to-end suites share: each test gets its own
// namespace on the shared control plane, waits with one poll helper, and
// deletes pods the same way.

// TestNamespace creates a namespace named from prefix for t, shows the
// components' last logLines log lines when t fails, and waits until the
// namespace's default ServiceAccount exists (admission refuses pods
// before it).
func (cp *ControlPlane) TestNamespace(ctx context.Context, t *testing.T, prefix string, logLines int, timeout time.Duration) string {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			cp.LogTails(&b, logLines)
			t.Logf("component logs:\n%s", b.String())
		}
	})
	ns, err := cp.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a namespace: %v", err)
	}
	Poll(ctx, t, timeout, "the default ServiceAccount", func() (bool, error) {
		_, err := cp.Client.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	return ns.Name
}

// Poll waits until cond holds, failing t with what it waited for and the
// last error cond returned when timeout passes.
func Poll(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		ok, err := cond()
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last error: %v)", what, err, last)
	}
}

// DeletePod deletes a pod and waits until it is gone: the API server only
// marks it, and the node (a kubelet or the stand-in) unprepares its claims
// and removes it.
func (cp *ControlPlane) DeletePod(ctx context.Context, t *testing.T, timeout time.Duration, namespace, name string) {
	t.Helper()
	if err := cp.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod %s: %v", name, err)
	}
	Poll(ctx, t, timeout, "pod "+name+" to be gone", func() (bool, error) {
		_, err := cp.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}
