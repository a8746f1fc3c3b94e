// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness/kubeletstandin"
	"github.com/gpufrac/gpufrac/internal/cli/status"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestAdminAccessClaimIsNotCounted: a monitoring pod (two containers, as a
// DCGM exporter with a sidecar) whose claim asks for the GPU with DRA's
// adminAccess, in a namespace labelled for it, is placed by the real
// kube-scheduler on a GPU its fractions fill but for the smallest share,
// and prepared with the GPU's device node and NVIDIA_VISIBLE_DEVICES but
// no limits, no hook, no MPS route; it is not counted: a further fraction
// of the smallest share then fills the GPU exactly (the scheduler does not
// count it either), and `kubectl gpufrac status` lists it apart, the
// GPU's guaranteed memory being the fractions' alone. A second monitor
// on the now full GPU stays unschedulable (below).
//
// Why not a GPU filled completely first: kube-scheduler v1.37.2's
// allocator checks an adminAccess request's capacity against what the
// ordinary claims consume like any other (allocator_incubating.go,
// allocateDevice: CmpRequestOverCapacity has no adminAccess exemption),
// and a gpufrac request consumes at least the smallest share, so a monitor
// needs that much unclaimed when it is placed; once placed, it is not
// counted (foreachAllocatedDevice skips adminAccess results). docs/resource-model.md.
func TestAdminAccessClaimIsNotCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	labelAdminNamespace(e)
	node := e.node("h200x1")
	class := e.classFor("all", "")
	gpu := e.device(node.Name, "gpu-0")
	capacity := gpu.Capacity["memory"].Value
	rest := capacity.DeepCopy()
	rest.Sub(resource.MustParse("41Gi"))
	e.createTemplate(claimTemplate("frac-a", class, "40Gi", 1, ""))
	e.createTemplate(claimTemplate("frac-b", class, rest.String(), 1, ""))
	e.createTemplate(claimTemplate("frac-c", class, "1Gi", 1, ""))
	e.createTemplate(monitorTemplate("monitor", class))

	e.createPod("a", "frac-a", node.Name)
	e.createPod("b", "frac-b", node.Name)
	e.waitRunning("a")
	e.waitRunning("b")
	e.createMonitorPod("mon", "monitor", node.Name)
	mon := e.waitRunning("mon")
	e.createPod("c", "frac-c", node.Name)
	e.waitRunning("c")

	// The GPU is now full of fractions; a second monitor cannot be placed
	// there (kube-scheduler v1.37.2 checks its smallest share against the
	// fractions' consumption, see above): pinned, so that an upstream change
	// is noticed and the docs follow.
	e.createMonitorPod("mon2", "monitor", node.Name)
	e.poll("monitor mon2 to be unschedulable on the full GPU", func() (bool, error) {
		_, ok := unschedulable(e.pod("mon2"))
		return ok, nil
	})
	e.deletePod("mon2")

	claim := e.claimOf(mon)
	if r := claim.Status.Allocation.Devices.Results; len(r) != 1 || !ptr.Deref(r[0].AdminAccess, false) || r[0].Device != "gpu-0" {
		t.Fatalf("monitor claim allocated %+v, want gpu-0 with adminAccess", r)
	}
	e.poll("the monitor claim's status.devices", func() (bool, error) {
		var err error
		claim, err = e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, claim.Name, metav1.GetOptions{})
		return err == nil && len(claim.Status.Devices) == 1 && claim.Status.Devices[0].Data != nil, err
	})
	checkClaimStatus(t, claim)
	var data domain.DeviceData
	if err := json.Unmarshal(claim.Status.Devices[0].Data.Raw, &data); err != nil || !data.AdminAccess || data.Enforced != domain.AdminEnforced || data.MPSServer != "" {
		t.Errorf("monitor status data %s (%v): want adminAccess, %q and no MPS server", claim.Status.Devices[0].Data.Raw, err, domain.AdminEnforced)
	}

	uuid := stringAttr(gpu, "uuid")
	rec := record(t, node, e.ns, "mon")
	if len(rec.Containers) != 2 {
		t.Fatalf("monitor pod: %d containers recorded, want both (one claim, no guarantee to multiply)", len(rec.Containers))
	}
	path := "/dev/nvidia" + strconv.FormatInt(intAttr(gpu, "minor"), 10)
	for _, c := range rec.Containers {
		checkMonitorContainer(t, c, uuid, path)
	}
	// The fractions keep what they had: the hook and the MPS route.
	if c := record(t, node, e.ns, "c").Containers[0]; !hasHook(c) || !hasEnv(c, "CUDA_MPS_PIPE_DIRECTORY") {
		t.Errorf("fraction c lost its hook or MPS route: env %v", c.Env)
	}

	sl := e.slices(node.Name)
	claims, err := e.client.ResourceV1().ResourceClaims(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gpus := status.Build(sl, claims.Items, node.Name)
	if len(gpus) != 1 {
		t.Fatalf("status lists %d GPUs, want 1", len(gpus))
	}
	g := gpus[0]
	if g.Guaranteed != capacity.Value() || len(g.Claims) != 3 || len(g.Monitors) != 1 || !g.Monitors[0].Prepared || g.Monitors[0].Pods[0] != "mon" {
		t.Errorf("status of gpu-0: guaranteed %d of %d, %d claims, monitors %+v; want the GPU full of the 3 fractions alone and the prepared monitor apart",
			g.Guaranteed, capacity.Value(), len(g.Claims), g.Monitors)
	}
}

// checkMonitorContainer: the GPU's device node and NVIDIA_VISIBLE_DEVICES,
// and nothing of a share: no limit variables, no hook, no MPS route.
func checkMonitorContainer(t *testing.T, c kubeletstandin.ContainerRecord, uuid, devicePath string) {
	t.Helper()
	if v, _ := c.EnvValue("NVIDIA_VISIBLE_DEVICES"); v != uuid {
		t.Errorf("container %s: NVIDIA_VISIBLE_DEVICES=%q, want %s", c.Name, v, uuid)
	}
	if !slices.ContainsFunc(c.DeviceNodes, func(d specs.LinuxDevice) bool { return d.Path == devicePath && d.Type == "c" && d.Major == 195 }) {
		t.Errorf("container %s: no character device %s among %+v", c.Name, devicePath, c.DeviceNodes)
	}
	for _, name := range []string{"CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "GPUFRAC_GPU_MEMORY_LIMITS", "GPUFRAC_GPU_MEMORY_REQUESTS", "NVIDIA_GPU_MEMORY_LIMIT", "NVIDIA_GPU_MEMORY_REQUEST"} {
		if v, ok := c.EnvValue(name); ok {
			t.Errorf("container %s: %s=%s; a monitor gets no limit and no MPS route", c.Name, name, v)
		}
	}
	if hasHook(c) {
		t.Errorf("container %s: runs gpufrac-cdi-hook; a monitor gets no limit", c.Name)
	}
	for _, m := range c.Mounts {
		if strings.HasPrefix(m.Destination, cdispec.ContainerMPSPipeDir) {
			t.Errorf("container %s: MPS route mount %+v; a monitor joins no MPS server", c.Name, m)
		}
	}
}

func hasHook(c kubeletstandin.ContainerRecord) bool {
	return c.Hooks != nil && slices.ContainsFunc(c.Hooks.CreateRuntime, func(h specs.Hook) bool { return strings.HasSuffix(h.Path, "gpufrac-cdi-hook") })
}

func hasEnv(c kubeletstandin.ContainerRecord, name string) bool {
	_, ok := c.EnvValue(name)
	return ok
}

// labelAdminNamespace lets the test's namespace use adminAccess: the API
// server refuses adminAccess in a claim or template elsewhere
// (resource.kubernetes.io/admin-access: "true", k8s.io/api resource/v1
// DRAAdminNamespaceLabelKey).
func labelAdminNamespace(e *env) {
	e.t.Helper()
	ns, err := e.client.CoreV1().Namespaces().Get(e.ctx, e.ns, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels[resourceapi.DRAAdminNamespaceLabelKey] = "true"
	if _, err := e.client.CoreV1().Namespaces().Update(e.ctx, ns, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// monitorTemplate asks class for one device with adminAccess and the
// smallest share (what the scheduler checks it against when placing it).
func monitorTemplate(name, class string) *resourceapi.ResourceClaimTemplate {
	tmpl := claimTemplate(name, class, "1Gi", 1, "")
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.AdminAccess = ptr.To(true)
	return tmpl
}

// createMonitorPod creates a pod of two containers using one claim from
// template, as a monitoring agent with a sidecar.
func (e *env) createMonitorPod(name, template, node string) *v1.Pod {
	e.t.Helper()
	ctr := func(n string) v1.Container {
		return v1.Container{Name: n, Image: "nvcr.io/nvidia/k8s/dcgm-exporter:4.4.1-4.6.0-ubuntu22.04", Command: []string{"sleep", "infinity"},
			Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1.PodSpec{
			NodeSelector:   map[string]string{"kubernetes.io/hostname": node},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
			Containers:     []v1.Container{ctr("exporter"), ctr("sidecar")},
		},
	}
	created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return created
}
