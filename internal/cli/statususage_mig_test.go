// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// A MIG instance's used memory lands on the instance: the plugin labels
// a share's series with the UUID its plan holds (gpu_uuid), for an
// instance the instance's own MIG-... UUID, which its slice device
// publishes as uuid (resourceslices.MIGDevice); the parent GPU's UUID
// (parentUUID) names no share of the instance. The instance here is the
// slice device the plugin would publish, beside a whole GPU of fractions.
func TestStatusMapUsageOfAMIGInstance(t *testing.T) {
	const migUUID, parentUUID = "MIG-1b2c3d4e-0000-5555-aaaa-0123456789ab", "GPU-1p"
	inv := &domain.Inventory{DriverVersion: "570.86.15", CUDADriverVersion: "12.8"}
	instance := domain.MIGDevice{UUID: migUUID, GIID: 2, CIID: 0, Profile: "3g.40gb", MemoryBytes: 40 << 30, Multiprocessors: 60,
		Parent: domain.GPU{UUID: parentUUID, Index: 1, ProductName: "NVIDIA H100 80GB HBM3", CUDAComputeCapability: "9.0", MemoryBytes: 80 << 30}}
	mig, err := resourceslices.MIGDevice(instance, inv)
	if err != nil {
		t.Fatal(err)
	}
	if got := ptr.Deref(mig.Attributes[resourceslices.AttrUUID].StringValue, ""); got != migUUID {
		t.Fatalf("the instance's slice device has uuid %q, want the instance's %s", got, migUUID)
	}
	gpu0 := resourceapi.Device{Name: "gpu-0", Capacity: memoryCapacity("80Gi"),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{resourceslices.AttrUUID: {StringValue: ptr.To("GPU-0c")}}}
	llm := prepared(allocatedClaim("llm", []resourceapi.DeviceRequestAllocationResult{share("node-a", "gpu-0", "s1", "40Gi")}),
		map[string]string{"memoryLimit": "40Gi", "computeMode": "TimeSlicing"})
	llm.UID = "uid-llm"
	// An instance is allocated whole: no share, no consumed capacity.
	trainer := prepared(allocatedClaim("trainer", []resourceapi.DeviceRequestAllocationResult{{Request: "mig", Driver: "gpufrac.dev", Pool: "node-a", Device: instance.Name()}}),
		map[string]string{"uuid": migUUID, "computeMode": "TimeSlicing"})
	trainer.UID = "uid-trainer"
	srv := promStandIn(t, []map[string]any{
		sample(map[string]string{"node": "node-a", "gpu_uuid": "GPU-0c", "claim_uid": "uid-llm"}, "21474836480"),
		sample(map[string]string{"node": "node-a", "gpu_uuid": migUUID, "claim_uid": "uid-trainer"}, "32212254720"),
		// The parent's UUID is no device of the map: not the instance's use.
		sample(map[string]string{"node": "node-a", "gpu_uuid": parentUUID, "claim_uid": "uid-trainer"}, "5368709120"),
	}, nil)
	got, err := runCLI(fakeCluster(gpuSlice("s", "node-a", gpu0, mig), llm, trainer), "status", "-o", "map", "--prometheus-url", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n  gpu-1-mig-2-0     40Gi [" + strings.Repeat("B", 29) + strings.Repeat("b", 9) + "] MIG 3g.40gb\n",
		"\n  B    40Gi    40Gi    30Gi  team/trainer (gpu-1-mig-2-0)\n",
		"\n  A    40Gi    40Gi    20Gi  team/llm (gpu-0)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("map lacks %q:\n%s", want, got)
		}
	}
}
