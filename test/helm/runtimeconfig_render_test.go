// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
)

// The plugin reads the NVIDIA runtime's config.toml only where
// kubeletPlugin.nvidiaRuntimeConfigDir names its host directory: then the
// directory is mounted read-only (hostPath type Directory, so a typo fails
// the pod instead of creating a directory on the host) and the plugin gets
// --nvidia-runtime-config pointing into it; by default neither.
func TestPluginReadsTheNVIDIARuntimeConfigOnlyWhereSet(t *testing.T) {
	ch := loadChart(t)
	const dir = "/usr/local/nvidia/toolkit/.config/nvidia-container-runtime"
	for _, tc := range []struct {
		set  int
		want string // host directory; "" = none
	}{{0, ""}, {1, dir}} {
		vs := valueSets()[tc.set]
		objs, _, err := render(ch, vs)
		if err != nil {
			t.Fatal(err)
		}
		var ds *appsv1.DaemonSet
		for _, o := range objs {
			if o.GetKind() == "DaemonSet" {
				ds = &appsv1.DaemonSet{}
				fromUnstructured(t, o, ds)
			}
		}
		if ds == nil {
			t.Fatalf("%s: no DaemonSet", vs.name)
		}
		var plugin v1.Container
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "kubelet-plugin" {
				plugin = c
			}
		}
		var vol *v1.Volume
		for i, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == "nvidia-runtime-config" {
				vol = &ds.Spec.Template.Spec.Volumes[i]
			}
		}
		mount := slices.IndexFunc(plugin.VolumeMounts, func(m v1.VolumeMount) bool { return m.Name == "nvidia-runtime-config" })
		arg := slices.Contains(plugin.Args, "--nvidia-runtime-config=/host-nvidia-runtime/config.toml")
		if tc.want == "" {
			if vol != nil || mount >= 0 || arg {
				t.Errorf("%s: the runtime config is mounted or read without kubeletPlugin.nvidiaRuntimeConfigDir (volume %v, mount %d, arg %t)", vs.name, vol, mount, arg)
			}
			continue
		}
		if vol == nil || vol.HostPath == nil || vol.HostPath.Path != tc.want || vol.HostPath.Type == nil || *vol.HostPath.Type != v1.HostPathDirectory {
			t.Errorf("%s: volume %+v, want hostPath %s of type Directory", vs.name, vol, tc.want)
		}
		if mount < 0 || !plugin.VolumeMounts[mount].ReadOnly || plugin.VolumeMounts[mount].MountPath != "/host-nvidia-runtime" {
			t.Errorf("%s: mounts %+v, want nvidia-runtime-config read-only at /host-nvidia-runtime", vs.name, plugin.VolumeMounts)
		}
		if !arg {
			t.Errorf("%s: plugin args %v lack --nvidia-runtime-config=/host-nvidia-runtime/config.toml", vs.name, plugin.Args)
		}
	}
}
