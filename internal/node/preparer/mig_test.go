// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
)

// migAllocated is a claim allocated a whole MIG instance, as the scheduler
// records it: no share ID, no consumed capacity (the device does not
// allow multiple allocations).
func migAllocated(name, device, params string) *resourceapi.ResourceClaim {
	c := allocated(name, device, "unused", "1Gi", params)
	c.Status.Allocation.Devices.Results[0].ShareID = nil
	c.Status.Allocation.Devices.Results[0].ConsumedCapacity = nil
	return c
}

func readSpec(t *testing.T, e *env) cdispecs.Spec {
	t.Helper()
	files := e.cdiFiles()
	if len(files) != 1 {
		t.Fatalf("CDI files %v, want one", files)
	}
	raw, err := os.ReadFile(filepath.Join(e.cdiDir, files[0]))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispecs.Spec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return spec
}

// TestMIGInstanceClaimIsPrepared: a claim on a MIG instance gets the
// parent's device node and the instance's two capability devices (the
// minors the node's mig-minors gives GPU instance 0 / compute instance 0
// of GPU minor 1), NVIDIA_VISIBLE_DEVICES naming the instance, and no
// memory limit, hook or MPS; it survives a restart and is unprepared
// without a trace. A claim asking for a memory limit on an instance is
// refused with the reason.
func TestMIGInstanceClaimIsPrepared(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnvGPUs(t, "h200x1,h100x1:mig=3g.40gb+1g.10gb")
	claim := migAllocated("mig", "gpu-1-mig-0-0", "")
	devs, err := e.preparer.Prepare(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 || devs[0].DeviceName != "gpu-1-mig-0-0" || devs[0].ShareID != nil {
		t.Fatalf("devices %+v", devs)
	}
	spec := readSpec(t, e)
	var nodes []string
	for _, d := range spec.Devices {
		for _, n := range d.ContainerEdits.DeviceNodes {
			nodes = append(nodes, n.Path)
			if strings.HasPrefix(n.Path, "/dev/nvidia-caps/") && (n.Type != "c" || n.Major != 236) {
				t.Errorf("capability node %+v", n)
			}
		}
	}
	if want := []string{"/dev/nvidia1", "/dev/nvidia-caps/nvidia-cap138", "/dev/nvidia-caps/nvidia-cap139"}; !slices.Equal(nodes, want) {
		t.Errorf("device nodes %v, want %v", nodes, want)
	}
	migUUID := catalog.MIGUUID(node, 1, 0, 0)
	if !slices.Contains(spec.ContainerEdits.Env, "NVIDIA_VISIBLE_DEVICES="+migUUID) {
		t.Errorf("env %v, want NVIDIA_VISIBLE_DEVICES=%s", spec.ContainerEdits.Env, migUUID)
	}
	for _, v := range spec.ContainerEdits.Env {
		if strings.Contains(v, "MEMORY_LIMIT") || strings.HasPrefix(v, "CUDA_MPS") {
			t.Errorf("a MIG container got %s", v)
		}
	}
	for _, h := range spec.ContainerEdits.Hooks {
		if slices.Contains(h.Args, "apply") {
			t.Errorf("a MIG container got the limit hook %v", h.Args)
		}
	}
	entry, ok := e.ckpt.Get(claim.UID)
	if !ok || entry.State != checkpoint.Completed || entry.Plan.Devices[0].MIG == nil || entry.Plan.Devices[0].MIG.Profile != "3g.40gb" {
		t.Fatalf("checkpoint entry %+v", entry)
	}
	if p := e.status.prepared[claim.UID]; p == nil || p.Devices[0].GPU.UUID != migUUID {
		t.Errorf("status %+v", p)
	}

	e.restart()
	if again, err := e.preparer.Prepare(ctx, claim); err != nil || !slices.EqualFunc(again, devs, func(a, b kubeletplugin.Device) bool {
		return a.DeviceName == b.DeviceName && slices.Equal(a.CDIDeviceIDs, b.CDIDeviceIDs)
	}) {
		t.Fatalf("after a restart: %+v, %v", again, err)
	}
	if q := e.ckpt.Quarantined(); len(q) != 0 {
		t.Fatalf("the MIG entry was quarantined at restart: %+v", q)
	}

	_, err = e.preparer.Prepare(ctx, migAllocated("limited", "gpu-1-mig-1-0", `,"memoryLimit":"5Gi"`))
	if err == nil || !strings.Contains(err.Error(), "MIG instance") || !strings.Contains(err.Error(), "memoryLimit") || !strings.Contains(err.Error(), "do not support MIG") {
		t.Errorf("a memory limit on a MIG instance: %v", err)
	}
	_, err = e.preparer.Prepare(ctx, migAllocated("sm", "gpu-1-mig-1-0", `,"computeMode":"SMSharing"`))
	if err == nil || !strings.Contains(err.Error(), "computeMode") {
		t.Errorf("SMSharing on a MIG instance: %v", err)
	}

	ref := kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "mig"}, UID: claim.UID}
	if err := e.preparer.Unprepare(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if files := e.cdiFiles(); len(files) != 0 {
		t.Errorf("CDI files left: %v", files)
	}
}

// A restart on a node whose MIG layout lost a prepared claim's instance
// sets the entry aside with the reason (quarantine, which the plugin
// reports), rather than serving or silently dropping it.
func TestMIGInstanceGoneAtRestartIsQuarantined(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	e := newEnvGPUs(t, "h200x1,h100x1:mig=3g.40gb+1g.10gb")
	claim := migAllocated("mig", "gpu-1-mig-1-0", "")
	if _, err := e.preparer.Prepare(ctx, claim); err != nil {
		t.Fatal(err)
	}
	e.inv.MIGDevices = e.inv.MIGDevices[:1] // instance 1 deleted while the plugin was down
	e.restart()
	q := e.ckpt.Quarantined()
	if len(q) != 1 || q[0].UID != claim.UID || !strings.Contains(q[0].Reason, "no longer configured on this node") {
		t.Fatalf("quarantined %+v, want the claim of the deleted instance with the reason", q)
	}
	if e.preparer.Uncertain() == "" {
		t.Error("the plugin does not report the set-aside entry")
	}
}
