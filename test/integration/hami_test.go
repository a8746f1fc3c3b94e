// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/translate/hami"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// startHAMiWebhook runs gpufrac-controller's webhooks for this test's
// namespace, opted in to HAMi translation.
func (e *env) startHAMiWebhook(class string) {
	e.t.Helper()
	w, err := cp.StartHAMiWebhook(e.ctx, e.ns, kai.Options{TimeSlicingClass: class, SMSharingClass: class})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			e.t.Errorf("stopping the webhook: %v", err)
		}
	})
}

// gpuPod is a pod whose one container has these limits (and, as the API
// server defaults them for extended resources, equal requests).
func gpuPod(name, node string, limits map[v1.ResourceName]string) *v1.Pod {
	p := kaiPod(name, node, nil)
	l := v1.ResourceList{}
	for k, v := range limits {
		l[k] = resource.MustParse(v)
	}
	p.Spec.Containers[0].Resources.Limits = l
	return p
}

func (e *env) create(p *v1.Pod) *v1.Pod {
	e.t.Helper()
	created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", p.Name, err)
	}
	return created
}

// allocatedMemory is the memory the scheduler's allocator consumed on
// each device of the claim.
func allocatedMemory(t *testing.T, claim *resourceapi.ResourceClaim) []resource.Quantity {
	t.Helper()
	if claim.Status.Allocation == nil {
		t.Fatalf("claim %s is not allocated", claim.Name)
	}
	var out []resource.Quantity
	for _, r := range claim.Status.Allocation.Devices.Results {
		out = append(out, r.ConsumedCapacity["memory"])
	}
	return out
}

// TestHAMiResourcesBecomeClaims creates HAMi pods through the real API
// server in a namespace opted in with the reference webhook entry: the
// webhook removes HAMi's resources and adds a claim, gpufrac-controller's
// loop creates the template, the scheduler allocates HAMi's memory (a
// percentage of the slice's memoryTotalMiB), and the pod runs with it; a
// pod HAMi refuses is refused with HAMi's reason.
func TestHAMiResourcesBecomeClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h100x2")
	class := e.classFor("hami", "")
	e.startHAMiWebhook(class)

	pod := gpuPod("hami-pct", node.Name, map[v1.ResourceName]string{hami.ResourceCount: "1", hami.ResourceMemoryPercentage: "25", "cpu": "100m"})
	pod.Spec.SchedulerName = "hami-scheduler"
	created := e.create(pod)
	limits := created.Spec.Containers[0].Resources.Limits
	if len(created.Spec.ResourceClaims) != 1 || created.Labels[hami.LabelTranslated] != "true" || created.Spec.SchedulerName != v1.DefaultSchedulerName {
		t.Fatalf("the pod was not translated: claims %+v, labels %v, scheduler %s", created.Spec.ResourceClaims, created.Labels, created.Spec.SchedulerName)
	}
	for _, r := range hami.Resources {
		if _, ok := limits[r]; ok {
			t.Errorf("limit %s left on the pod", r)
		}
		if _, ok := created.Spec.Containers[0].Resources.Requests[r]; ok {
			t.Errorf("request %s left on the pod", r)
		}
	}
	if _, ok := limits["cpu"]; !ok {
		t.Errorf("the cpu limit was removed too: %v", limits)
	}
	tmplName := *created.Spec.ResourceClaims[0].ResourceClaimTemplateName
	var stored *resourceapi.ResourceClaimTemplate
	e.poll("the template "+tmplName+" made by gpufrac-controller's loop", func() (bool, error) {
		var err error
		stored, err = e.client.ResourceV1().ResourceClaimTemplates(e.ns).Get(e.ctx, tmplName, metav1.GetOptions{})
		return err == nil, nil
	})
	if want, err := hami.TemplatesFor(created, hami.Options{Class: class}); err != nil || !equality.Semantic.DeepEqual(stored.Spec.Spec, want[0].Spec.Spec) {
		t.Errorf("the stored template differs from the computed one (%v):\n%+v\n%+v", err, stored.Spec.Spec, want)
	}
	running := e.waitRunning("hami-pct")
	dev := e.device(node.Name, e.claimOf(running).Status.Allocation.Devices.Results[0].Device)
	total := intAttr(dev, "memoryTotalMiB")
	hamiMiB := total * 25 / 100 // HAMi's Fit: dev.Totalmem * MemPercentagereq / 100
	got := allocatedMemory(t, e.claimOf(running))
	want := hami.Allocated(*resource.NewQuantity(hamiMiB<<20, resource.BinarySI), hami.Options{})
	if len(got) != 1 || got[0].Cmp(want) != 0 {
		t.Errorf("allocated %v, want %s (HAMi's %d MiB of %d, rounded up by the request policy)", got, want.String(), hamiMiB, total)
	}
	checkShare(t, record(t, node, e.ns, "hami-pct").Containers[0], []resourceapi.Device{dev}, want.Value()>>20, want.Value()>>20)

	_, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, gpuPod("hami-bad", node.Name, map[v1.ResourceName]string{hami.ResourceCount: "1", hami.ResourceMemoryPercentage: "150"}), metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "invalid nvidia.com/gpumem-percentage value 150 in container main: must be an integer between 0 and 100") {
		t.Errorf("invalid pod: got %v, want HAMi's refusal", err)
	}
}

// wholeGPUClass creates deployments/whole-gpu-deviceclass.yaml, which maps
// nvidia.com/gpu cluster-wide: the tests that use it do not run in
// parallel, so no other test sees the name taken.
func (e *env) wholeGPUClass() *resourceapi.DeviceClass {
	e.t.Helper()
	class, err := deployments.WholeGPUDeviceClassObject()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.client.ResourceV1().DeviceClasses().Create(e.ctx, class, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating DeviceClass %s: %v", class.Name, err)
	}
	e.t.Cleanup(func() {
		_ = e.client.ResourceV1().DeviceClasses().Delete(context.WithoutCancel(e.ctx), class.Name, metav1.DeleteOptions{})
	})
	return class
}

// extendedClaim is the claim the scheduler made for the pod's extended
// resources (KEP-5004), nil when it has none.
func (e *env) extendedClaim(pod *v1.Pod) *resourceapi.ResourceClaim {
	e.t.Helper()
	st := pod.Status.ExtendedResourceClaimStatus
	if st == nil {
		return nil
	}
	claim, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, st.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the extended-resource claim %s: %v", st.ResourceClaimName, err)
	}
	return claim
}

// TestPlainNvidiaGPUPodGetsAWholeGPU: with the whole-GPU class, a pod that
// asks only nvidia.com/gpu: 1 is placed by the real scheduler on a gpufrac
// GPU and consumes its whole memory capacity (the slice's requestPolicy
// default); a fraction then finds no room on that GPU, and lands there
// once the pod is gone.
func TestPlainNvidiaGPUPodGetsAWholeGPU(t *testing.T) {
	e := newEnv(t)
	node := e.node("h100x1")
	class := e.wholeGPUClass()
	e.createTemplate(claimTemplate("small", e.classFor("frac", ""), "1Gi", 1, ""))

	plain := e.create(gpuPod("plain", node.Name, map[v1.ResourceName]string{"nvidia.com/gpu": "1"}))
	if len(plain.Spec.ResourceClaims) != 0 {
		t.Fatalf("the plain pod got claims in its spec: %+v", plain.Spec.ResourceClaims)
	}
	running := e.waitRunning("plain")
	claim := e.extendedClaim(running)
	if claim == nil {
		t.Fatalf("the plain pod has no extended-resource claim: %+v", running.Status)
	}
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 1 || claim.Spec.Devices.Requests[0].Exactly.DeviceClassName != class.Name {
		t.Fatalf("claim %s: %+v", claim.Name, claim.Spec)
	}
	dev := e.device(node.Name, results[0].Device)
	capacity := dev.Capacity["memory"].Value
	if got := allocatedMemory(t, claim); got[0].Cmp(capacity) != 0 {
		t.Errorf("the plain pod consumed %s of a %s GPU, want all of it", got[0].String(), capacity.String())
	}
	checkShare(t, record(t, node, e.ns, "plain").Containers[0], []resourceapi.Device{dev}, capacity.Value()>>20, capacity.Value()>>20)

	// A 1Gi fraction on the held GPU: no room.
	e.createPod("fraction", "small", node.Name)
	time.Sleep(3 * time.Second)
	e.poll("the fraction to be unschedulable", func() (bool, error) {
		_, ok := unschedulable(e.pod("fraction"))
		return ok, nil
	})
	if p := e.pod("fraction"); p.Spec.NodeName != "" {
		t.Fatalf("a fraction landed on a GPU held whole: node %s", p.Spec.NodeName)
	}
	e.deletePod("plain")
	e.waitRunning("fraction")

	// And the converse: a plain pod does not land on a GPU holding a fraction.
	e.create(gpuPod("plain-2", node.Name, map[v1.ResourceName]string{"nvidia.com/gpu": "1"}))
	e.poll("the second plain pod to be unschedulable", func() (bool, error) {
		_, ok := unschedulable(e.pod("plain-2"))
		return ok, nil
	})
}

// TestHAMiPodGetsOneAllocation: in a namespace opted in to HAMi
// translation, with the whole-GPU class mapping nvidia.com/gpu, a HAMi pod
// and a plain nvidia.com/gpu pod each get exactly one allocation: the
// translation's claim, and no extended-resource claim beside it.
func TestHAMiPodGetsOneAllocation(t *testing.T) {
	e := newEnv(t)
	node := e.node("h100x2")
	e.wholeGPUClass()
	e.startHAMiWebhook(e.classFor("hami-one", ""))

	e.create(gpuPod("hami", node.Name, map[v1.ResourceName]string{hami.ResourceCount: "1", hami.ResourceMemory: "4000", hami.ResourceCores: "30"}))
	e.create(gpuPod("plain", node.Name, map[v1.ResourceName]string{"nvidia.com/gpu": "1"}))
	for _, name := range []string{"hami", "plain"} {
		p := e.waitRunning(name)
		if c := e.extendedClaim(p); c != nil {
			t.Errorf("pod %s got a second allocation from %s: claim %s", name, c.Spec.Devices.Requests[0].Exactly.DeviceClassName, c.Name)
		}
		if len(p.Spec.ResourceClaims) != 1 || len(p.Status.ResourceClaimStatuses) != 1 {
			t.Errorf("pod %s: claims %+v, statuses %+v", name, p.Spec.ResourceClaims, p.Status.ResourceClaimStatuses)
			continue
		}
		claims, err := e.client.ResourceV1().ResourceClaims(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range claims.Items {
			for _, r := range c.Status.ReservedFor {
				if r.Name == name && c.Status.Allocation != nil {
					n += len(c.Status.Allocation.Devices.Results)
				}
			}
		}
		if n != 1 {
			t.Errorf("pod %s holds %d allocated devices, want 1", name, n)
		}
		var removed map[string]json.RawMessage
		if err := json.Unmarshal([]byte(p.Annotations[hami.AnnotationResources]), &removed); err != nil || removed["main"] == nil {
			t.Errorf("pod %s: removal not recorded: %q (%v)", name, p.Annotations[hami.AnnotationResources], err)
		}
	}
	// The plain pod was translated as HAMi reads it: the GPU alone.
	plain := e.claimOf(e.pod("plain"))
	dev := e.device(node.Name, plain.Status.Allocation.Devices.Results[0].Device)
	if got, capacity := allocatedMemory(t, plain), dev.Capacity["memory"].Value; got[0].Cmp(capacity) != 0 {
		t.Errorf("the plain pod consumed %s, want the whole capacity %s", got[0].String(), capacity.String())
	}
}
