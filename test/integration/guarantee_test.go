// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// TestOneGuaranteePolicy: the one-guarantee ValidatingAdmissionPolicy of
// deployments/webhooks.yaml, applied by the real kube-apiserver to claim
// status writes as the scheduler makes them: a claim allocated a gpufrac
// device is reserved for one pod; a second is refused with the reason,
// also when two writers race from the same version (the API server applies
// one, the other's retry is refused); removals pass, and another driver's
// claim may be shared.
func TestOneGuaranteePolicy(t *testing.T) {
	e := newEnv(t)
	if err := cp.ApplyGuaranteePolicy(e.ctx, e.ns); err != nil {
		t.Fatal(err)
	}
	claims := e.client.ResourceV1().ResourceClaims(e.ns)
	// Pods that exist, so that the resource claim controller keeps their
	// reservations; none can be scheduled.
	uids := map[string]types.UID{}
	for _, name := range []string{"a", "b", "c", "x", "y"} {
		pod, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{
			NodeSelector: map[string]string{"no-such-node": "true"}, Containers: []v1.Container{{Name: "main", Image: "busybox"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = pod.UID
	}
	uid := func(name string) types.UID { return uids[name] }
	create := func(name string) *resourceapi.ResourceClaim {
		t.Helper()
		c, err := claims.Create(e.ctx, harness.GuaranteeProbeClaim(name), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	reserve := func(c *resourceapi.ResourceClaim, pods ...string) (*resourceapi.ResourceClaim, error) {
		c = c.DeepCopy()
		c.Status = harness.ReservedFor(c.Status, uid, pods...)
		return claims.UpdateStatus(e.ctx, c, metav1.UpdateOptions{})
	}
	refused := func(err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "give each pod its own claim") {
			t.Fatalf("got %v, want Forbidden naming %q", err, want)
		}
		t.Logf("refused: %v", err)
	}

	c := create("shared")
	c, err := reserve(c, "a")
	if err != nil {
		t.Fatalf("the first pod's reservation, written with the allocation: %v", err)
	}
	_, err = reserve(c, "a", "b")
	refused(err, "ResourceClaim "+e.ns+"/shared would be reserved for pods/a and pods/b at once")
	if c, err = reserve(c); err != nil {
		t.Fatalf("removing the only consumer: %v", err)
	}

	// Two pods bound together: two writers from the same version.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, pod := range []string{"b", "c"} {
		wg.Go(func() {
			errs[i] = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				latest, err := claims.Get(e.ctx, c.Name, metav1.GetOptions{})
				if err != nil {
					return err
				}
				var pods []string
				for _, r := range latest.Status.ReservedFor {
					pods = append(pods, r.Name)
				}
				_, err = reserve(latest, append(pods, pod)...)
				return err
			})
		})
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) {
		t.Fatalf("two writers racing: %v and %v, want one reserved and one refused", errs[0], errs[1])
	}
	for _, err := range errs {
		if err != nil {
			refused(err, "at once")
		}
	}
	latest, err := claims.Get(e.ctx, c.Name, metav1.GetOptions{})
	if err != nil || len(latest.Status.ReservedFor) != 1 {
		t.Fatalf("after the race: %v, reserved for %+v, want one pod", err, latest.Status.ReservedFor)
	}

	// Two consumers in the first write.
	_, err = reserve(create("fresh"), "x", "y")
	refused(err, "pods/x and pods/y")

	// Another driver's claim: its sharing is not gpufrac's to judge.
	other := create("nic")
	other.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: "nic.example.com", Pool: "probe-node", Device: "nic-0"}}}}
	if _, err := reserve(other, "a", "b"); err != nil {
		t.Errorf("another driver's claim reserved for two pods: %v", err)
	}

	// A monitoring claim (every gpufrac device allocated with adminAccess)
	// guarantees nothing: the policy lets any number of pods hold it.
	labelAdminNamespace(e)
	mc := harness.GuaranteeProbeClaim("monitor")
	mc.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	monitor, err := claims.Create(e.ctx, mc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	monitor.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: "gpufrac.dev", Pool: "probe-node", Device: "gpu-0", AdminAccess: ptr.To(true)}}}}
	if _, err := reserve(monitor, "a", "b"); err != nil {
		t.Errorf("a monitoring (adminAccess) claim reserved for two pods: %v", err)
	}
}
