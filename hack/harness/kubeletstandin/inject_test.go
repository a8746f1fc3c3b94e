// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletstandin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
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

// TestInjectPodFailsOnAMalformedHookLimit: a gpufrac hook whose limit
// argument gpufrac-cdi-hook would refuse fails the container, as the
// runtime running the hook would; well-formed ones pass.
func TestInjectPodFailsOnAMalformedHookLimit(t *testing.T) {
	const spec = `cdiVersion: "0.6.0"
kind: k8s.gpufrac.dev/fraction
devices:
- name: claim-a-gpu0
  containerEdits:
    hooks: [{hookName: createRuntime, path: /usr/local/bin/gpufrac-cdi-hook, args: [gpufrac-cdi-hook, apply, --gpu, %s]}]
`
	pod := &v1.Pod{Spec: v1.PodSpec{
		ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("claim-a")}},
		Containers:     []v1.Container{{Name: "c", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}}}},
	}}
	prepared := map[string]PreparedClaim{"claim-a": {Devices: []PreparedDevice{{CDIDeviceIDs: []string{"k8s.gpufrac.dev/fraction=claim-a-gpu0"}}}}}
	for arg, want := range map[string]string{
		hookarg.FormatLimit(hookarg.Limit{UUID: "GPU-0000", Soft: 1 << 30, Hard: 2 << 30}): "",
		"GPU-0000=3:2":   "soft limit 3 is above hard limit 2",
		"GPU-0000=1Gi:2": `soft limit "1Gi" is not a number of bytes`,
		"GPU-0000":       "want UUID=SOFT:HARD",
		"'GPU-0000=1:0'": "hard limit 0",
	} {
		root := t.TempDir()
		if err := os.WriteFile(filepath.Join(root, "gpufrac.yaml"), []byte(fmt.Sprintf(spec, arg)), 0o644); err != nil {
			t.Fatal(err)
		}
		recs, err := injectPod(root, pod, prepared)
		switch {
		case want == "" && err != nil:
			t.Errorf("--gpu %s: %v", arg, err)
		case want == "" && (len(recs) != 1 || recs[0].Hooks == nil || len(recs[0].Hooks.CreateRuntime) != 1):
			t.Errorf("--gpu %s: records %+v, want the hook recorded", arg, recs)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "container c")):
			t.Errorf("--gpu %s: err = %v, want the container failed with %q", arg, err, want)
		}
	}
}

// TestCheckHookArgs: the stand-in's check of gpufrac hooks, in each form
// of the flag, and leaving other programs' hooks alone.
func TestCheckHookArgs(t *testing.T) {
	hook := func(path string, args ...string) *specs.Hooks {
		return &specs.Hooks{CreateRuntime: []specs.Hook{{Path: path, Args: args}}}
	}
	const bin = "/usr/local/bin/gpufrac-cdi-hook"
	for _, tc := range []struct {
		hooks *specs.Hooks
		want  string
	}{
		{nil, ""},
		{hook(bin, "gpufrac-cdi-hook", "apply", "--gpu", "GPU-1=1:2", "--gpu=GPU-2=0:5", "--driver-root", "/run/nvidia/driver"), ""},
		{hook(bin, "gpufrac-cdi-hook", "install", "--dir", "/x"), ""},
		{hook("/usr/bin/nvidia-cdi-hook", "nvidia-cdi-hook", "--gpu", "not ours"), ""},
		{hook(bin, "gpufrac-cdi-hook", "apply", "--gpu=GPU-2=5:0"), "hard limit 0"},
		{hook(bin, "gpufrac-cdi-hook", "apply", "--gpu", "GPU-1=1:2", "--gpu"), "--gpu without a value"},
		{hook(bin, "gpufrac-cdi-hook", "apply", "--driver-root", "/"), "applies no --gpu limit"},
		{hook("/opt/hooks/other", "gpufrac-cdi-hook", "apply", "--gpu", "x"), "want UUID=SOFT:HARD"},
		{prestart(t, specs.Hook{Path: bin, Args: []string{"gpufrac-cdi-hook", "apply", "--gpu", "GPU-1=2:1"}}), "prestart hook"},
	} {
		err := checkHookArgs(tc.hooks)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("checkHookArgs(%+v) = %v, want %q", tc.hooks, err, tc.want)
		}
	}
}

// prestart is hooks with h in the (deprecated) prestart phase, built from
// the OCI wire form as a runtime would read it.
func prestart(t *testing.T, h specs.Hook) *specs.Hooks {
	t.Helper()
	b, err := json.Marshal(map[string][]specs.Hook{"prestart": {h}})
	if err != nil {
		t.Fatal(err)
	}
	var hooks specs.Hooks
	if err := json.Unmarshal(b, &hooks); err != nil {
		t.Fatal(err)
	}
	return &hooks
}
