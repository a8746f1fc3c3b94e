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
