// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
)

func TestStatusCommand(t *testing.T) {
	capacity := memoryCapacity("141Gi")
	attrs := func(uuid string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"uuid": {StringValue: ptr.To(uuid)}, "productName": {StringValue: ptr.To("NVIDIA H200 141GB HBM3e")}}
	}
	slice := gpuSlice("s", "node-a",
		resourceapi.Device{Name: "gpu-0", Attributes: withReserve(attrs("GPU-0"), 1024), Capacity: capacity},
		resourceapi.Device{Name: "gpu-1", Attributes: attrs("GPU-1"), Capacity: capacity, Taints: []resourceapi.DeviceTaint{{Key: "gpufrac.dev/unhealthy", Value: "XID-79", Effect: "NoSchedule"}}})
	claim := prepared(allocatedClaim("llm", []resourceapi.DeviceRequestAllocationResult{share("node-a", "gpu-0", "s1", "40Gi")}, "llm-0"),
		map[string]string{"uuid": "GPU-0", "memoryRequest": "40Gi", "memoryLimit": "60Gi", "computeMode": "TimeSlicing", "enforcement": "dmem"})
	clientFor := fakeCluster(slice, claim)

	got, err := runCLI(clientFor, "status")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(got, "\n")
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "node-a gpu-0 NVIDIA H200 141GB HBM3e 141Gi 1Gi 40Gi 60Gi 0.43 1" {
		t.Errorf("gpu-0 row %q: want the server reserve (1Gi) after the memory", lines[1])
	}
	if f := strings.Fields(lines[3]); !strings.Contains(lines[0], "SERVER RESERVE") || len(f) < 8 || f[1] != "gpu-1" || f[7] != "-" {
		t.Errorf("status lacks the SERVER RESERVE column, or gpu-1's '-':\n%s", got)
	}
	for _, want := range []string{"team/llm", "pods: llm-0", "TimeSlicing", "gpufrac.dev/unhealthy=XID-79:NoSchedule"} {
		if !strings.Contains(got, want) {
			t.Errorf("status lacks %q:\n%s", want, got)
		}
	}

	got, err = runCLI(clientFor, "status", "-o", "json", "--node", "node-a")
	if err != nil {
		t.Fatal(err)
	}
	var gpus []struct {
		Device     string
		Reserve    int64 `json:"serverReserveBytes"`
		Guaranteed int64 `json:"guaranteedBytes"`
		LimitSum   int64 `json:"limitSumBytes"`
		Claims     []struct{ Prepared bool }
	}
	if err := json.Unmarshal([]byte(got), &gpus); err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 2 || gpus[0].Reserve != 1<<30 || gpus[1].Reserve != 0 || gpus[0].Guaranteed != 40<<30 || gpus[0].LimitSum != 60<<30 || !gpus[0].Claims[0].Prepared || len(gpus[1].Claims) != 0 {
		t.Errorf("json %+v", gpus)
	}
}

// withReserve adds the slice's MPS server reserve (MiB) to attrs.
func withReserve(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, mib int64) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs["mpsServerReserveMiB"] = resourceapi.DeviceAttribute{IntValue: ptr.To(mib)}
	return attrs
}

// TestStatusFragmentationLine: status ends with one line per GPU pool: the
// GPUs holding shares against the lower bound, and the GPUs that would
// free up if their shares moved, across nodes even under --node.
func TestStatusFragmentationLine(t *testing.T) {
	model := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")}}
	slice := func(node string, devices ...string) *resourceapi.ResourceSlice {
		s := gpuSlice(node, node)
		for _, d := range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: d, Attributes: model, Capacity: memoryCapacity("80Gi")})
		}
		return s
	}
	claim := func(name, node, device, memory string) *resourceapi.ResourceClaim {
		return allocatedClaim(name, []resourceapi.DeviceRequestAllocationResult{share(node, device, name, memory)})
	}
	for _, tc := range []struct {
		name   string
		claims []runtime.Object
		want   string
	}{
		{"fragmented", []runtime.Object{claim("a", "node-a", "gpu-0", "30Gi"), claim("b", "node-b", "gpu-0", "30Gi")},
			`pool "NVIDIA H100 80GB HBM3": 2 GPUs hold shares, at least 1 needed (60Gi guaranteed over 80Gi a GPU); 1 would free up if their shares moved elsewhere in the pool: node-a/gpu-0 (30Gi in 1) (a report, nothing is evicted)`},
		{"packed", []runtime.Object{claim("a", "node-a", "gpu-0", "60Gi"), claim("b", "node-b", "gpu-0", "60Gi")},
			`pool "NVIDIA H100 80GB HBM3": 2 GPUs hold shares, at least 2 needed (120Gi guaranteed over 80Gi a GPU); no GPU would free up by moving its shares`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := runCLI(fakeCluster(append([]runtime.Object{slice("node-a", "gpu-0"), slice("node-b", "gpu-0", "gpu-1")}, tc.claims...)...), "status", "--node", "node-b")
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(got), "\n")
			if last := lines[len(lines)-1]; last != tc.want {
				t.Errorf("last line\n%s\nwant\n%s\n(all:\n%s)", last, tc.want, got)
			}
		})
	}
}
