// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletstandin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

const testSpec = `cdiVersion: "0.6.0"
kind: k8s.gpufrac.dev/fraction
devices:
- name: claim-a-gpu0
  containerEdits:
    env: [NVIDIA_VISIBLE_DEVICES=GPU-0000, NVIDIA_GPU_MEMORY_LIMITS=61440]
    deviceNodes: [{path: /dev/nvidia0, type: c, major: 195, minor: 0}]
- name: claim-a-gpu1
  containerEdits:
    deviceNodes: [{path: /dev/nvidia1, type: c, major: 195, minor: 1}]
containerEdits:
  hooks: [{hookName: createContainer, path: /usr/local/bin/gpufrac-cdi-hook, args: [gpufrac-cdi-hook]}]
  mounts: [{hostPath: /run/mps, containerPath: /run/mps, options: [bind]}]
`

func TestInjectPodAppliesTheKubeletsDeviceSelection(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "gpufrac.yaml"), []byte(testSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{Spec: v1.PodSpec{
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-a")}},
		InitContainers: []v1.Container{{Name: "init"}},
		Containers: []v1.Container{
			{Name: "all", Env: []v1.EnvVar{{Name: "OWN", Value: "1"}}, Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}},
			{Name: "second", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu", Request: "b"}}}},
		},
	}}
	prepared := map[string]PreparedClaim{"claim-a": {Name: "claim-a", Devices: []PreparedDevice{
		{RequestNames: []string{"a"}, Device: "gpu-0", CDIDeviceIDs: []string{"k8s.gpufrac.dev/fraction=claim-a-gpu0"}},
		{RequestNames: []string{"b"}, Device: "gpu-1", CDIDeviceIDs: []string{"k8s.gpufrac.dev/fraction=claim-a-gpu1"}},
	}}}
	recs, err := injectPod(root, pod, prepared)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 || !recs[0].Init || len(recs[0].CDIDevices) != 0 {
		t.Fatalf("records %+v: want the init container first, without devices", recs)
	}
	all, second := recs[1], recs[2]
	if len(all.CDIDevices) != 2 || len(all.DeviceNodes) != 2 {
		t.Errorf("container all: devices %v, nodes %+v, want both", all.CDIDevices, all.DeviceNodes)
	}
	if v, _ := all.EnvValue("NVIDIA_VISIBLE_DEVICES"); v != "GPU-0000" {
		t.Errorf("container all: NVIDIA_VISIBLE_DEVICES=%q", v)
	}
	if v, _ := all.EnvValue("OWN"); v != "1" {
		t.Errorf("container all lost its own environment: %v", all.Env)
	}
	if all.Hooks == nil || len(all.Hooks.CreateContainer) != 1 || !strings.HasSuffix(all.Hooks.CreateContainer[0].Path, "gpufrac-cdi-hook") {
		t.Errorf("container all: hooks %+v", all.Hooks)
	}
	if len(all.Mounts) != 1 || all.Mounts[0].Destination != "/run/mps" {
		t.Errorf("container all: mounts %+v", all.Mounts)
	}
	if !slices.Equal(second.CDIDevices, []string{"k8s.gpufrac.dev/fraction=claim-a-gpu1"}) || len(second.DeviceNodes) != 1 || second.DeviceNodes[0].Minor != 1 {
		t.Errorf("container second (request b only): devices %v nodes %+v", second.CDIDevices, second.DeviceNodes)
	}
}

func TestInjectPodFailsOnUnknownDevice(t *testing.T) {
	pod := &v1.Pod{Spec: v1.PodSpec{
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-a")}},
		Containers:     []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	prepared := map[string]PreparedClaim{"claim-a": {Devices: []PreparedDevice{{CDIDeviceIDs: []string{"k8s.gpufrac.dev/fraction=missing"}}}}}
	_, err := injectPod(t.TempDir(), pod, prepared)
	if err == nil || !strings.Contains(err.Error(), "fraction=missing") {
		t.Fatalf("injecting an undefined CDI device: err = %v, want an error naming it", err)
	}
}
