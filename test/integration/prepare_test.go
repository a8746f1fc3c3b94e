// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/harness/kubeletstandin"
)

// These tests need claim preparation (issue 4): the plugin writes a CDI spec
// per claim, returns its device IDs, and the stand-in injects them.

const cdiKindPrefix = "k8s.gpufrac.dev/fraction="

// cdiDevices lists the CDI devices defined by the specs in a node's CDI root,
// read with the CDI library as the runtime reads them.
func cdiDevices(t *testing.T, node *harness.Node) []string {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(node.CDIRoot), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		t.Fatalf("reading CDI specs in %s: %v", node.CDIRoot, err)
	}
	if err := cache.Refresh(); err != nil {
		t.Errorf("CDI specs in %s do not validate: %v", node.CDIRoot, err)
	}
	return cache.ListDevices()
}

func record(t *testing.T, node *harness.Node, ns, pod string) kubeletstandin.PodRecord {
	t.Helper()
	rec, ok := node.StandIn.Pod(ns, pod)
	if !ok || len(rec.Containers) == 0 {
		t.Fatalf("the stand-in has no record of pod %s/%s", ns, pod)
	}
	return rec
}

// checkShare checks what one container got for a share: the GPU's uuid, the
// guaranteed memory and the limit in MiB, the GPU's device node with type,
// major and minor, and the enforcement hook.
func checkShare(t *testing.T, c kubeletstandin.ContainerRecord, gpus []resourceapi.Device, requestMiB, limitMiB int64) {
	t.Helper()
	visible, _ := c.EnvValue("NVIDIA_VISIBLE_DEVICES")
	for _, gpu := range gpus {
		uuid := stringAttr(gpu, "uuid")
		if !slices.Contains(strings.Split(visible, ","), uuid) {
			t.Errorf("container %s: NVIDIA_VISIBLE_DEVICES=%q lacks %s (%s)", c.Name, visible, uuid, gpu.Name)
		}
		path := "/dev/nvidia" + strconv.FormatInt(intAttr(gpu, "minor"), 10)
		if !slices.ContainsFunc(c.DeviceNodes, func(d specs.LinuxDevice) bool { return d.Path == path && d.Type == "c" && d.Major == 195 }) {
			t.Errorf("container %s: no character device %s (major 195) among %+v", c.Name, path, c.DeviceNodes)
		}
	}
	for name, want := range map[string]int64{"GPUFRAC_GPU_MEMORY_REQUESTS": requestMiB, "GPUFRAC_GPU_MEMORY_LIMITS": limitMiB} {
		got, ok := c.EnvValue(name)
		if !ok || !strings.Contains(got, strconv.FormatInt(want, 10)) {
			t.Errorf("container %s: %s=%q, want %d (MiB)", c.Name, name, got, want)
		}
	}
	hooked := c.Hooks != nil && slices.ContainsFunc(c.Hooks.CreateRuntime, func(h specs.Hook) bool { return strings.HasSuffix(h.Path, "gpufrac-cdi-hook") })
	if !hooked {
		t.Errorf("container %s: no createRuntime hook running gpufrac-cdi-hook: %+v", c.Name, c.Hooks)
	}
}

// checkClaimStatus checks that the plugin wrote status.devices for every
// allocated share, with a Ready condition.
func checkClaimStatus(t *testing.T, claim *resourceapi.ResourceClaim) {
	t.Helper()
	for _, r := range claim.Status.Allocation.Devices.Results {
		idx := slices.IndexFunc(claim.Status.Devices, func(d resourceapi.AllocatedDeviceStatus) bool {
			return d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device &&
				(r.ShareID == nil && d.ShareID == nil || r.ShareID != nil && d.ShareID != nil && string(*r.ShareID) == *d.ShareID)
		})
		if idx < 0 {
			t.Errorf("claim %s: no status.devices entry for %s/%s/%s (share %v): %+v", claim.Name, r.Driver, r.Pool, r.Device, r.ShareID, claim.Status.Devices)
			continue
		}
		if !slices.ContainsFunc(claim.Status.Devices[idx].Conditions, func(c metav1.Condition) bool {
			return c.Type == "Ready" && c.Status == metav1.ConditionTrue
		}) {
			t.Errorf("claim %s: device %s has no Ready condition: %+v", claim.Name, r.Device, claim.Status.Devices[idx].Conditions)
		}
	}
}

// TestPreparedClaimReachesTheContainer: a 40Gi share with a 60Gi limit, and a
// claim for two GPUs, prepared through the plugin's DRA socket and injected
// with the CDI library; the claims' status says what was done.
func TestPreparedClaimReachesTheContainer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	// A container reaches one MPS daemon and daemons are per GPU, so a
	// claim for two GPUs runs where MPS is off (strict partitions).
	noMPS := e.nodeWith(harness.NodeOptions{GPUs: "h200x2", NoMPS: true})
	class := e.classFor("all", "")
	e.createTemplate(claimTemplate("llm-40g", class, "40Gi", 1, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\nmemoryLimit: 60Gi\ncomputeMode: TimeSlicing\n"))
	e.createTemplate(claimTemplate("two-gpus", class, "20Gi", 2, ""))
	e.createPod("llm", "llm-40g", node.Name)
	e.createPod("pair", "two-gpus", noMPS.Name)

	for _, tc := range []struct {
		pod                  string
		gpus                 int
		requestMiB, limitMiB int64
	}{{"llm", 1, 40 * 1024, 60 * 1024}, {"pair", 2, 20 * 1024, 20 * 1024}} {
		pod := e.waitRunning(tc.pod)
		node := node
		if tc.pod == "pair" {
			node = noMPS
		}
		claim := e.claimOf(pod)
		var gpus []resourceapi.Device
		for _, r := range claim.Status.Allocation.Devices.Results {
			gpus = append(gpus, e.device(node.Name, r.Device))
		}
		if len(gpus) != tc.gpus || tc.gpus == 2 && gpus[0].Name == gpus[1].Name {
			t.Fatalf("pod %s: allocated %d devices %v, want %d distinct", tc.pod, len(gpus), claim.Status.Allocation.Devices.Results, tc.gpus)
		}
		rec := record(t, node, e.ns, tc.pod)
		c := rec.Containers[0]
		if len(c.CDIDevices) != tc.gpus {
			t.Errorf("pod %s: %d CDI devices %v, want %d", tc.pod, len(c.CDIDevices), c.CDIDevices, tc.gpus)
		}
		defined := cdiDevices(t, node)
		for _, id := range c.CDIDevices {
			if !strings.HasPrefix(id, cdiKindPrefix) || !slices.Contains(defined, id) {
				t.Errorf("pod %s: CDI device %q is not a %s device defined in %s (defined: %v)", tc.pod, id, cdiKindPrefix, node.CDIRoot, defined)
			}
		}
		if v, _ := c.EnvValue("APP"); v != tc.pod {
			t.Errorf("pod %s: the container's own environment was lost: APP=%q", tc.pod, v)
		}
		checkShare(t, c, gpus, tc.requestMiB, tc.limitMiB)
		e.poll("status.devices of claim "+claim.Name, func() (bool, error) {
			claim = e.claimOf(pod)
			return len(claim.Status.Devices) >= tc.gpus, nil
		})
		checkClaimStatus(t, claim)
	}
}

// TestSevenPodsRunAndAReplacementStarts: six 40Gi pods on 2 x H200 run with
// their shares; deleting one unprepares its claim (CDI spec gone) and the
// seventh starts in its place.
func TestSevenPodsRunAndAReplacementStarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("all", "")
	e.createTemplate(claimTemplate("share-40g", class, "40Gi", 1, ""))
	for i := range 7 {
		e.createPod(fmt.Sprintf("p%d", i), "share-40g", node.Name)
	}
	var pending string
	e.poll("six pods Running and one unschedulable", func() (bool, error) {
		runningPods, waiting := 0, []string{}
		for _, p := range e.pods() {
			switch {
			case running(&p):
				runningPods++
			case p.Spec.NodeName == "":
				if _, ok := unschedulable(&p); ok {
					pending = p.Name
				}
			default:
				waiting = append(waiting, p.Name+": "+whyNotRunning(&p))
			}
		}
		if runningPods == 6 && pending != "" {
			return true, nil
		}
		return false, fmt.Errorf("%d Running, not yet: %v", runningPods, waiting)
	})

	var victim *v1.Pod
	for _, p := range e.pods() {
		if p.Name != pending {
			victim = &p
			break
		}
	}
	claim := e.claimOf(victim)
	ids := record(t, node, e.ns, victim.Name).Containers[0].CDIDevices
	e.deletePod(victim.Name)
	if !node.StandIn.Unprepared(claim.UID) {
		t.Errorf("claim %s of the deleted pod was not unprepared", claim.Name)
	}
	defined := cdiDevices(t, node)
	for _, id := range ids {
		if slices.Contains(defined, id) {
			t.Errorf("CDI device %s of the unprepared claim %s is still defined in %s", id, claim.Name, node.CDIRoot)
		}
	}
	e.waitRunning(pending)
}

// TestInvalidFractionConfigFailsThatClaimAlone: a claim whose memoryLimit is
// below its request is refused, with the field and the reason, by the
// validating webhook when it exists; until then the plugin fails that claim
// alone at prepare, and the reason reaches the pod as an event.
func TestInvalidFractionConfigFailsThatClaimAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x1")
	class := e.classFor("all", "")
	bad := claimTemplate("limit-below-request", class, "40Gi", 1, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\nmemoryLimit: 20Gi\n")
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, bad, metav1.CreateOptions{}); err != nil {
		if !strings.Contains(err.Error(), "memoryLimit") {
			t.Fatalf("the invalid template was refused without naming memoryLimit: %v", err)
		}
		return // refused at admission, with the field
	}
	e.createTemplate(claimTemplate("fine", class, "40Gi", 1, ""))
	e.createPod("bad", "limit-below-request", node.Name)
	e.createPod("good", "fine", node.Name)

	var event v1.Event
	t.Run("prepare error becomes a pod event", func(t *testing.T) {
		e.poll("a FailedPrepareDynamicResources event on pod bad", func() (bool, error) {
			evs := e.events("bad", "FailedPrepareDynamicResources")
			if len(evs) > 0 {
				event = evs[0]
			}
			return len(evs) > 0, nil
		})
		claim := e.claimOf(e.pod("bad"))
		if !strings.Contains(event.Message, claim.Name) || event.Type != v1.EventTypeWarning {
			t.Errorf("event %s %q does not name the claim %s", event.Type, event.Message, claim.Name)
		}
		pod := e.pod("bad")
		if running(pod) || len(pod.Status.ContainerStatuses) == 0 || pod.Status.ContainerStatuses[0].State.Waiting == nil {
			t.Errorf("pod bad is not waiting in ContainerCreating: %+v", pod.Status)
		}
	})
	t.Run("the reason names the field", func(t *testing.T) {
		if !strings.Contains(event.Message, "memoryLimit") {
			t.Errorf("prepare error %q does not name memoryLimit", event.Message)
		}
	})
	t.Run("other claims are prepared", func(t *testing.T) {
		e.waitRunning("good")
		good := record(t, node, e.ns, "good").Containers[0].CDIDevices
		for _, id := range cdiDevices(t, node) {
			if !slices.Contains(good, id) {
				t.Errorf("CDI device %s is defined, but only pod good's claim was prepared (%v)", id, good)
			}
		}
	})
}

// TestSMSharingClaimGetsTheGPUsMPSDaemon: an SMSharing claim makes the plugin
// start the MPS control daemon Pod of its GPU (on the node, in the plugin's
// namespace) before Prepare returns; the container gets the MPS pipe and the
// pinned-memory ceiling; the daemon goes with the last SMSharing claim. The
// stand-in marks the daemon Pod Running like any Pod: no MPS server runs.
func TestSMSharingClaimGetsTheGPUsMPSDaemon(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.nodeWith(harness.NodeOptions{GPUs: "h200x1", MPSImage: "gpufrac/mps-control-daemon:integration"})
	class := e.classFor("all", "")
	e.createTemplate(claimTemplate("mps-20g", class, "20Gi", 1, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\ncomputeMode: SMSharing\nmemoryLimit: 30Gi\n"))
	e.createPod("worker", "mps-20g", node.Name)
	pod := e.waitRunning("worker")
	claim := e.claimOf(pod)
	gpu := e.device(node.Name, claim.Status.Allocation.Devices.Results[0].Device)
	uuid := stringAttr(gpu, "uuid")

	daemons := func() []v1.Pod {
		list, err := e.client.CoreV1().Pods(harness.MPSNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/node=" + node.Name})
		if err != nil {
			t.Fatalf("listing MPS daemon Pods: %v", err)
		}
		return list.Items
	}
	ds := daemons()
	if len(ds) != 1 || ds[0].Spec.NodeName != node.Name || ds[0].Labels["gpufrac.dev/gpu"] != uuid {
		t.Fatalf("want one MPS daemon Pod on %s for GPU %s, got %d: %+v", node.Name, uuid, len(ds), ds)
	}

	c := record(t, node, e.ns, "worker").Containers[0]
	if v, ok := c.EnvValue("CUDA_MPS_PIPE_DIRECTORY"); !ok || v == "" {
		t.Errorf("no CUDA_MPS_PIPE_DIRECTORY in %v", c.Env)
	} else if !slices.ContainsFunc(c.Mounts, func(m specs.Mount) bool { return m.Destination == v }) {
		t.Errorf("the MPS pipe directory %s is not mounted: %+v", v, c.Mounts)
	}
	if v, _ := c.EnvValue("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"); v != uuid+"=30720M" {
		t.Errorf("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%q, want %s=30720M", v, uuid)
	}
	if v, _ := c.EnvValue("NVIDIA_VISIBLE_DEVICES"); v != uuid {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q, want %s", v, uuid)
	}

	e.deletePod("worker")
	e.poll("the MPS daemon Pod to go with the last SMSharing claim", func() (bool, error) {
		if n := len(daemons()); n != 0 {
			return false, fmt.Errorf("%d daemon Pods left", n)
		}
		return true, nil
	})
}

// TestBurstRefusedWhereNoMPSDaemonRuns (issue 15): on a node with
// per-cgroup limits whose plugin runs no MPS daemons, nothing could evict a
// borrower to uphold a neighbour's request, so the slice says mpsVersion
// none and a claim whose limit exceeds its request is refused there with
// the reason, while a strict partition (limit = request) runs.
func TestBurstRefusedWhereNoMPSDaemonRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.nodeWith(harness.NodeOptions{GPUs: "h200x1", NoMPS: true})
	class := e.classFor("all", "")
	e.createTemplate(claimTemplate("burst", class, "40Gi", 1, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\nmemoryLimit: 100Gi\n"))
	e.createTemplate(claimTemplate("strict", class, "40Gi", 1, ""))
	e.createPod("burst", "burst", node.Name)
	e.createPod("strict", "strict", node.Name)
	var event v1.Event
	e.poll("a FailedPrepareDynamicResources event on pod burst", func() (bool, error) {
		evs := e.events("burst", "FailedPrepareDynamicResources")
		if len(evs) > 0 {
			event = evs[0]
		}
		return len(evs) > 0, nil
	})
	for _, want := range []string{"memoryLimit 100Gi exceeds the request 40Gi", "runs no MPS daemon (mpsVersion none", "MPS eviction"} {
		if !strings.Contains(event.Message, want) {
			t.Errorf("refusal %q does not say %q", event.Message, want)
		}
	}
	e.waitRunning("strict")
	slices, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil || len(slices.Items) == 0 {
		t.Fatalf("slices of %s: %v", node.Name, err)
	}
	for _, d := range slices.Items[0].Spec.Devices {
		if v := d.Attributes["mpsVersion"].StringValue; v == nil || *v != "none" {
			t.Errorf("device %s publishes mpsVersion %v, want none on a node without MPS daemons", d.Name, d.Attributes["mpsVersion"])
		}
	}
}
