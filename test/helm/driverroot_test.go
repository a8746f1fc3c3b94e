// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
)

// The hook runs on the host, so the plugin must pass it the host path of
// the driver root the chart mounts for itself: with the GPU Operator,
// /run/nvidia/driver, where NVML is; the host's library path has none.
func TestPluginPassesTheDriverRootToTheHook(t *testing.T) {
	ch := loadChart(t)
	for _, tc := range []struct {
		set  int
		want string
	}{{0, "/"}, {1, "/run/nvidia/driver"}} {
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
		var args []string
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "kubelet-plugin" {
				args = c.Args
			}
		}
		if !slices.Contains(args, "--driver-root="+tc.want) {
			t.Errorf("%s: plugin args %v lack --driver-root=%s", vs.name, args, tc.want)
		}
	}
}

// TestMPSDaemonsRunThePluginsOwnImage: the MPS daemon Pods run the chart's
// own image (its gpufrac-mps-launcher runs the driver root's
// nvidia-cuda-mps-control), never an image a user supplies; mps.enabled
// false is the platform team's switch that turns MPS off.
func TestMPSDaemonsRunThePluginsOwnImage(t *testing.T) {
	ch := loadChart(t)
	off := valueSets()[0]
	off.name, off.values = "mps-off", map[string]any{"mps": map[string]any{"enabled": false}}
	for _, tc := range []struct {
		vs valueSet
		on bool
	}{{valueSets()[0], true}, {valueSets()[1], true}, {off, false}} {
		objs, _, err := render(ch, tc.vs)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() != "DaemonSet" {
				continue
			}
			ds := &appsv1.DaemonSet{}
			fromUnstructured(t, o, ds)
			for _, c := range ds.Spec.Template.Spec.Containers {
				if c.Name != "kubelet-plugin" {
					continue
				}
				image := ""
				for _, e := range c.Env {
					if e.Name == "MPS_DAEMON_IMAGE" {
						image = e.Value
					}
				}
				if tc.on && image != c.Image {
					t.Errorf("%s: MPS_DAEMON_IMAGE %q, want the plugin's own image %q", tc.vs.name, image, c.Image)
				}
				if !tc.on && image != "" {
					t.Errorf("%s: MPS_DAEMON_IMAGE %q with mps.enabled=false", tc.vs.name, image)
				}
				if !slices.Contains(c.Args, "--driver-root-mount=/driver-root") {
					t.Errorf("%s: plugin args %v lack --driver-root-mount=/driver-root, where it looks for nvidia-cuda-mps-control", tc.vs.name, c.Args)
				}
			}
		}
	}
}
