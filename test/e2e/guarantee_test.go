// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The one-guarantee rule on the real node, with the real scheduler and
// kubelet, and the one-guarantee policy of deployments/webhooks.yaml in the
// API server (the pod webhook, a courtesy, is not registered here): a
// claim allocated a gpufrac share is guaranteed to one pod's containers,
// whichever way a second holder comes.

// refusedPolicy and refusedPlugin are what the pod refused is told: by the
// scheduler's event (the API server refused its reservation) and by the
// kubelet's (the plugin refused Prepare).
const (
	refusedPolicy = "would be reserved for"
	refusedPlugin = "Give each container its own claim"
)

func TestOneGuaranteeTwoPodsTogether(t *testing.T) {
	e := newGuaranteeEnv(t)
	e.createClaim("shared", e.classFor(3), "10Gi")
	e.createPod(sharingPod("first", "shared"))
	e.createPod(sharingPod("second", "shared"))
	running, refused := e.oneRunsOneWaits("first", "second", refusedPolicy)
	e.checkOnlyOneGuaranteed("shared", running, refused)
}

func TestOneGuaranteePodAfterPrepare(t *testing.T) {
	e := newGuaranteeEnv(t)
	e.createClaim("shared", e.classFor(3), "10Gi")
	e.createPod(sharingPod("first", "shared"))
	e.waitRunning("first")
	// The claim is prepared on the node: the kubelet would not ask the
	// plugin again for a second pod.
	e.createPod(sharingPod("later", "shared"))
	running, refused := e.oneRunsOneWaits("first", "later", refusedPolicy)
	e.checkOnlyOneGuaranteed("shared", running, refused)
}

func TestOneGuaranteeOneClaimTwoNames(t *testing.T) {
	e := newGuaranteeEnv(t)
	e.createClaim("shared", e.classFor(3), "10Gi")
	pod := sharingPod("aliased", "shared")
	pod.Spec.ResourceClaims = append(pod.Spec.ResourceClaims, v1.PodResourceClaim{Name: "alias", ResourceClaimName: ptr.To("shared")})
	helper := pod.Spec.Containers[0]
	helper.Name, helper.Resources.Claims = "helper", []v1.ResourceClaim{{Name: "alias"}}
	pod.Spec.Containers = append(pod.Spec.Containers, helper)
	e.createPod(pod)
	// kube-scheduler v1.37.2 reserves the claim for the pod once per name,
	// which the API server refuses as a duplicate: the pod never binds.
	// Were it bound, the plugin would refuse Prepare (refusedPlugin; unit
	// test TestPrepareRefusesAMultipliedGuarantee). The pod webhook, not
	// registered here, says why when the pod is created.
	e.waitEvent("aliased", "Duplicate value", refusedPlugin)
	p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "aliased", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" && p.Status.Phase != v1.PodPending {
		t.Errorf("the pod that names one claim twice is %s on node %q", p.Status.Phase, p.Spec.NodeName)
	}
	for _, st := range p.Status.ContainerStatuses {
		if st.State.Running != nil {
			t.Errorf("container %s of the pod that names one claim twice runs", st.Name)
		}
	}
	e.checkOnlyOneGuaranteed("shared", nil, p)
}

func newGuaranteeEnv(t *testing.T) *env {
	e := newEnv(t)
	if err := cp.ApplyGuaranteePolicy(e.ctx, e.ns); err != nil {
		t.Fatal(err)
	}
	return e
}

// createClaim creates a claim of one GPU share of memory, for pods to name.
func (e *env) createClaim(name, class, memory string) {
	e.t.Helper()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
			AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}}}}}}}
	if _, err := e.client.ResourceV1().ResourceClaims(e.ns).Create(e.ctx, claim, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating ResourceClaim %s: %v", name, err)
	}
}

// sharingPod is the probe pod naming claim directly.
func sharingPod(name, claim string) *v1.Pod {
	pod := probePod(name, "")
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	return pod
}

// oneRunsOneWaits waits until one of pods a and b runs and the other is
// told why it waits, and returns them in that order. Which of two pods
// created together wins is the scheduler's choice.
func (e *env) oneRunsOneWaits(a, b, reason string) (*v1.Pod, *v1.Pod) {
	e.t.Helper()
	var running, waiting string
	e.poll("one of "+a+" and "+b+" to run", func() (bool, error) {
		for _, name := range []string{a, b} {
			p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == v1.PodRunning {
				running = name
				return true, nil
			}
		}
		return false, nil
	})
	waiting = b
	if running == b {
		waiting = a
	}
	first := e.waitRunning(running)
	e.waitEvent(waiting, reason)
	second, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, waiting, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if second.Status.Phase != v1.PodPending || second.Spec.NodeName != "" {
		e.t.Errorf("pod %s is %s on node %q, want Pending and unbound", waiting, second.Status.Phase, second.Spec.NodeName)
	}
	return first, second
}

// waitEvent waits for an event of pod whose message contains one of wants.
func (e *env) waitEvent(pod string, wants ...string) {
	e.t.Helper()
	e.poll("an event of pod "+pod+" saying "+strings.Join(wants, " or "), func() (bool, error) {
		events, err := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			for _, want := range wants {
				if strings.Contains(ev.Message, want) {
					e.t.Logf("pod %s, %s: %s", pod, ev.Reason, ev.Message)
					return true, nil
				}
			}
		}
		return false, nil
	})
}

// checkOnlyOneGuaranteed: the claim is reserved for the running pod alone
// (none when nil), the hook set its limits for that pod's container only,
// and for no container of the refused pod.
func (e *env) checkOnlyOneGuaranteed(claimName string, running, refused *v1.Pod) {
	e.t.Helper()
	claim, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, claimName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var reserved []string
	for _, r := range claim.Status.ReservedFor {
		reserved = append(reserved, r.Name)
	}
	if running != nil && (len(reserved) != 1 || reserved[0] != running.Name) {
		e.t.Errorf("claim %s is reserved for %v, want only %s", claimName, reserved, running.Name)
	}
	records, err := node.LimitRecords()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range records {
		uid := string(refused.UID)
		if strings.Contains(r.Cgroup, uid) || strings.Contains(r.Cgroup, strings.ReplaceAll(uid, "-", "_")) {
			e.t.Errorf("the hook set limits for the refused pod %s: %+v", refused.Name, r)
		}
	}
	if running != nil {
		g := e.gpuOfClaim(claim)
		e.checkHook(running, g, 10*gib, 10*gib)
	}
}

// gpuOfClaim is the allocated device of a claim named directly.
func (e *env) gpuOfClaim(claim *resourceapi.ResourceClaim) gpu {
	e.t.Helper()
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		e.t.Fatalf("claim %s is not allocated one device: %+v", claim.Name, claim.Status.Allocation)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	slices, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				return gpu{UUID: *d.Attributes["uuid"].StringValue, Minor: *d.Attributes["minor"].IntValue, Claim: claim}
			}
		}
	}
	e.t.Fatalf("device %s is in no slice of node %s", device, node.Name)
	return gpu{}
}
