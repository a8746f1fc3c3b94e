// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/harness/kubeletstandin"
)

// TestOneNodeReachesNoFurther (issue 34, "Local stays local"), on the real
// API server with the chart's RBAC and node policy: a node's plugin cannot
// publish an absurd GPU memory (the policy refuses it, so one node cannot
// change the GPU sizes the cluster's admission reads), and an Unprepare
// on one node of a claim prepared on another, through the first node's
// own DRA socket, leaves the other node's status entry intact.
func TestOneNodeReachesNoFurther(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	defer func() {
		if t.Failed() {
			var b strings.Builder
			cp.LogTails(&b, 30)
			t.Logf("component logs:\n%s", b.String())
		}
	}()
	vs := valueSet{name: "installed", release: "gpufrac", namespace: harness.MPSNamespace, values: map[string]any{
		"controller": map[string]any{"kaiTranslation": false, "configValidation": false},
		"mps":        map[string]any{"enabled": true},
	}}
	objs, _, err := render(loadChart(t), vs)
	if err != nil {
		t.Fatal(err)
	}
	ensureNamespace(ctx, t, vs.namespace)
	a := newApplier(t)
	for _, o := range objs {
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("installing: %v", err)
		}
	}
	sa := "system:serviceaccount:" + vs.namespace + ":gpufrac-kubelet-plugin"
	const nodeA, nodeB = "br-n1", "br-n2"
	pluginA, kubeconfigA := impersonate(t, sa, map[string][]string{nodeNameExtra: {nodeA}})
	_, kubeconfigB := impersonate(t, sa, map[string][]string{nodeNameExtra: {nodeB}})

	// What a node may publish of its own GPUs is bounded by the policy.
	withMemory := func(name, memory string, totalMiB int64) *resourceapi.ResourceSlice {
		s := slice(name, nodeA)
		d := resourceapi.Device{Name: "gpu-0", Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}}}
		if totalMiB > 0 {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"memoryTotalMiB": {IntValue: ptr.To(totalMiB)}}
		}
		s.Spec.Devices = []resourceapi.Device{d}
		return s
	}
	const bounded = "may publish a device memory capacity only above 0, at most 4Ti and at most the device's memoryTotalMiB"
	var denial error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, denial = pluginA.ResourceV1().ResourceSlices().Create(ctx, withMemory("br-absurd", "1e30", 0), metav1.CreateOptions{})
		if denial == nil {
			return false, cp.Client.ResourceV1().ResourceSlices().Delete(ctx, "br-absurd", metav1.DeleteOptions{})
		}
		return strings.Contains(denial.Error(), bounded), nil
	})
	if err != nil {
		t.Fatalf("a node published a GPU of 1e30 bytes: %v (last answer: %v)", err, denial)
	}
	for _, tc := range []struct {
		name, memory string
		totalMiB     int64
	}{
		{"zero memory", "0", 0},
		{"above 4Ti", "5Ti", 0},
		{"above the memoryTotalMiB it publishes", "141Gi", 81920},
	} {
		_, err := pluginA.ResourceV1().ResourceSlices().Create(ctx, withMemory("br-bad", tc.memory, tc.totalMiB), metav1.CreateOptions{})
		wantRefused(t, tc.name, err, bounded)
	}
	if _, err := pluginA.ResourceV1().ResourceSlices().Create(ctx, withMemory("br-fine", "141Gi", 144384), metav1.CreateOptions{}); err != nil {
		t.Errorf("a node publishing 141Gi of a 144384 MiB GPU was refused: %v", err)
	} else if err := pluginA.ResourceV1().ResourceSlices().Delete(ctx, "br-fine", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Two nodes: node A's plugin is driven by hand through its own DRA
	// socket; node B runs a pod.
	a1, err := cp.AddNode(ctx, harness.NodeOptions{Name: nodeA, GPUs: "h200x1", NoMPS: true, NoStandIn: true, PluginArgs: []string{"--kubeconfig=" + kubeconfigA}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = a1.Stop() }()
	b1, err := cp.AddNode(ctx, harness.NodeOptions{Name: nodeB, GPUs: "h200x1", NoMPS: true, PluginArgs: []string{"--kubeconfig=" + kubeconfigB}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = b1.Stop() }()
	ns := "blast-radius"
	ensureNamespace(ctx, t, ns)
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "ten"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "gpufrac.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}},
			}}},
		}}},
	}
	if _, err := cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "on-b", Namespace: ns},
		Spec: v1.PodSpec{
			NodeSelector:   map[string]string{"kubernetes.io/hostname": nodeB},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
			Containers: []v1.Container{{
				Name: "app", Image: "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04",
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var claim *resourceapi.ResourceClaim
	poll(ctx, t, "the pod on node B Running with its claim's status written", func() (bool, error) {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != v1.PodRunning || len(p.Status.ResourceClaimStatuses) == 0 {
			return false, err
		}
		claim, err = cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, ""), metav1.GetOptions{})
		return err == nil && len(claim.Status.Devices) == 1, err
	})
	if d := claim.Status.Devices[0]; d.Pool != nodeB {
		t.Fatalf("status.devices[0] in pool %s, want %s", d.Pool, nodeB)
	}

	// Node A is told to unprepare node B's claim (as a compromised or
	// confused kubelet, or anything reaching its socket, could).
	draA, err := kubeletstandin.Dial(ctx, a1.RegistrarDir, "gpufrac.dev", 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer draA.Close()
	res, err := draA.Unprepare(ctx, []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}})
	if err != nil || res.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("node A's Unprepare of node B's claim: %v %+v (it has nothing to undo and must succeed)", err, res)
	}
	// Stopping node A's plugin flushes every status write it queued.
	if err := a1.Stop(); err != nil {
		t.Fatal(err)
	}
	got, err := cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Devices) != 1 || got.Status.Devices[0].Pool != nodeB {
		t.Errorf("node B's status entry after node A's Unprepare: %+v", got.Status.Devices)
	}
	logText, err := os.ReadFile(a1.PluginLog())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logText), "no status cleared") {
		t.Errorf("node A's plugin did not log the Unprepare of a claim it holds no record of")
	}
	if err := cp.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
