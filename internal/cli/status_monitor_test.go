// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestStatusListsMonitorsApartAndSaysWhatOlderNodesEnforce: a claim
// allocated with adminAccess (a monitoring pod) is listed under its GPU
// apart from the fractions and adds nothing to the GPU's guaranteed memory
// or limits; a node without per-cgroup limits gets a line saying what it
// enforces, read from the slice the plugin publishes (node-a, legacy MPS)
// or, for a slice an older plugin wrote without those attributes, from its
// memoryEnforcement (node-b).
func TestStatusListsMonitorsApartAndSaysWhatOlderNodesEnforce(t *testing.T) {
	gpu := domain.GPU{UUID: "GPU-a0", Index: 0, Minor: 0, ProductName: "NVIDIA H200", Architecture: "Hopper", Brand: "Nvidia",
		CUDAComputeCapability: "9.0", MemoryBytes: 141 << 30}
	inv := &domain.Inventory{DriverVersion: "570.86.15", CUDADriverVersion: "12.8", Enforcement: domain.EnforcementMPS, MPSVersion: domain.MPSVersionLegacy}
	devA, err := resourceslices.Device(gpu, inv)
	if err != nil {
		t.Fatal(err)
	}
	sliceA := gpuSlice("a", "node-a", devA)
	devB := resourceapi.Device{Name: "gpu-0", Capacity: devA.Capacity, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"uuid": {StringValue: ptr.To("GPU-b0")}, "memoryEnforcement": {StringValue: ptr.To("none")}, "mpsVersion": {StringValue: ptr.To("none")}}}
	sliceB := gpuSlice("b", "node-b", devB)
	result := func(id string, memory string, admin bool) []resourceapi.DeviceRequestAllocationResult {
		r := share("node-a", "gpu-0", id, memory)
		if admin {
			r.AdminAccess = ptr.To(true)
		}
		return []resourceapi.DeviceRequestAllocationResult{r}
	}
	clientFor := fakeCluster(sliceA, sliceB, allocatedClaim("llm", result("s1", "40Gi", false), "llm-0"), allocatedClaim("dcgm", result("s2", "1Gi", true), "dcgm-x"))

	got, err := runCLI(clientFor, "status")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"team/dcgm", "pods: dcgm-x", "monitor (adminAccess, not prepared yet)",
		"node-a (memoryEnforcement mps): guarantee: " + domain.GuaranteeSchedulerOnly + "; TimeSlicing limit: " + domain.LimitNone + "; SMSharing limit: " + domain.LimitLegacyMPS,
		"node-b (memoryEnforcement none): guarantee: " + domain.GuaranteeSchedulerOnly + "; TimeSlicing limit: " + domain.LimitNone + "; SMSharing limit: " + domain.LimitRefusedNoMPS,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}
	if f := strings.Fields(strings.Split(got, "\n")[1]); len(f) < 10 || f[0] != "node-a" || f[6] != "40Gi" || f[7] != "40Gi" || f[9] != "1" {
		t.Errorf("node-a's row %v: want 40Gi guaranteed and limits, 1 claim (the monitor not among them)", f)
	}

	got, err = runCLI(clientFor, "status", "-o", "json", "--node", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	var gpus []struct {
		Guaranteed  int64 `json:"guaranteedBytes"`
		Claims      []struct{ Name string }
		Monitors    []struct{ Name string }
		Enforcement string `json:"memoryEnforcement"`
	}
	if err := json.Unmarshal([]byte(got), &gpus); err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 1 || gpus[0].Guaranteed != 40<<30 || len(gpus[0].Claims) != 1 || len(gpus[0].Monitors) != 1 || gpus[0].Monitors[0].Name != "dcgm" || gpus[0].Enforcement != "mps" {
		t.Errorf("json %+v", gpus)
	}
}
