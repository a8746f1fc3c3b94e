// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func migClaim(name, uid, device string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "mig", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "mig.gpufrac.dev"},
		}}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "mig", Driver: "gpufrac.dev", Pool: nodeName, Device: device,
			}}},
		}},
	}
}

// TestMIGLayoutChangeReportsPreparedClaims: the operator deletes the MIG
// instance a prepared claim holds and creates another. The plugin's next
// read of the layout republishes the slice with the instances the node has
// now, reports the claim (a MIGInstanceLost Event on it) without dropping
// it (it stays prepared until the kubelet unprepares it), and prepares a
// claim on the new instance.
func TestMIGLayoutChangeReportsPreparedClaims(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held := migClaim("held", "claim-uid-held", "gpu-1-mig-0-0")
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}, held)
	cfg, node := simNodeConfigGPUs(t, client, "h200x1,h100x1:mig=3g.40gb+1g.10gb")
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	devices := func() []string {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return nil
		}
		var names []string
		for _, d := range list.Items[0].Spec.Devices {
			names = append(names, d.Name)
		}
		return names
	}
	waitDevices := func(want []string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return slices.Equal(devices(), want), nil
		}); err != nil {
			t.Fatalf("slice devices %v, want %v", devices(), want)
		}
	}
	waitDevices([]string{"gpu-0", "gpu-1-mig-0-0", "gpu-1-mig-1-0"})
	res, err := plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{held})
	if err != nil || res[held.UID].Err != nil {
		t.Fatalf("preparing the MIG claim: %v %+v", err, res)
	}

	// The operator replaces instance 0 (3g.40gb) by a 2g.20gb one.
	dev := node.NVML.Devices[1].(*server.Device)
	if err := gpusim.RemoveMIGInstance(dev, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := gpusim.AddMIGInstance(node.NVML, dev, "2g.20gb"); err != nil {
		t.Fatal(err)
	}
	if err := plugin.CheckMIGLayout(ctx); err != nil {
		t.Fatal(err)
	}
	waitDevices([]string{"gpu-0", "gpu-1-mig-1-0", "gpu-1-mig-2-0"})
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		evs, err := client.EventsV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == "MIGInstanceLost" && e.Regarding.Name == "held" && strings.Contains(e.Note, "gpu-1-mig-0-0") && strings.Contains(e.Note, "3g.40gb") {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatal("no MIGInstanceLost Event on the claim whose instance is gone")
	}
	if specs, _ := filepath.Glob(filepath.Join(cfg.CDIRoot, "*claim-uid-held*")); len(specs) != 1 {
		t.Errorf("the held claim's CDI spec after the change: %v, want it kept until Unprepare", specs)
	}
	// A second read of an unchanged layout reports nothing new.
	if err := plugin.CheckMIGLayout(ctx); err != nil {
		t.Fatal(err)
	}

	fresh := migClaim("fresh", "claim-uid-fresh", "gpu-1-mig-2-0")
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err = plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{fresh})
	if err != nil || res[fresh.UID].Err != nil {
		t.Fatalf("preparing a claim on the new instance: %v %+v", err, res)
	}
}

// TestMIGModeChangeAtRuntime: while the plugin runs, an operator turns MIG
// mode on for GPU 1, which holds a prepared fraction, and creates an
// instance on it, and turns MIG mode off for GPU 2, whose instance a
// prepared MIG claim holds (deleting the instance first). The plugin's
// next read of the layout republishes the slice (GPU 1 as its instance,
// GPU 2 as a fraction GPU with the compute modes --sm-sharing-gpus gives
// it), reports both claims once each (a FractionGPULost and a
// MIGInstanceLost Event, gpufrac_fraction_gpus_lost_total and
// gpufrac_mig_instances_lost_total) without dropping them, and plans new
// claims against the new layout.
func TestMIGModeChangeAtRuntime(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frac := shareClaim("frac", "gpu-1", "10Gi")
	mig := migClaim("mig", "claim-uid-mig", "gpu-2-mig-0-0")
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}, frac, mig)
	cfg, node := simNodeConfigGPUs(t, client, "h100x2,h100x1:mig=3g.40gb")
	cfg.SMSharingGPUs = "none"
	reg := prometheus.NewRegistry()
	cfg.Metrics = reg
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	waitSlice(ctx, t, client, []string{"gpu-0", "gpu-1", "gpu-2-mig-0-0"})
	res, err := plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{frac, mig})
	if err != nil || res[frac.UID].Err != nil || res[mig.UID].Err != nil {
		t.Fatalf("preparing the claims: %v %+v", err, res)
	}

	// MIG mode cannot change under compute processes (NVML_ERROR_IN_USE),
	// nor, in the simulation, off while instances exist.
	gpu1, gpu2 := node.NVML.Devices[1].(*server.Device), node.NVML.Devices[2].(*server.Device)
	if err := gpusim.SetMIGMode(gpu2, nodeName, false); !errors.Is(err, nvml.ERROR_IN_USE) {
		t.Fatalf("turning MIG off with an instance: %v, want NVML_ERROR_IN_USE", err)
	}
	if err := gpusim.SetMIGMode(gpu1, nodeName, true); err != nil {
		t.Fatal(err)
	}
	if _, err := gpusim.AddMIGInstance(node.NVML, gpu1, "3g.40gb"); err != nil {
		t.Fatal(err)
	}
	if err := gpusim.RemoveMIGInstance(gpu2, 0); err != nil {
		t.Fatal(err)
	}
	if err := gpusim.SetMIGMode(gpu2, nodeName, false); err != nil {
		t.Fatal(err)
	}
	if err := plugin.CheckMIGLayout(ctx); err != nil {
		t.Fatal(err)
	}
	slice := waitSlice(ctx, t, client, []string{"gpu-0", "gpu-2", "gpu-1-mig-0-0"})
	for _, d := range slice.Spec.Devices {
		if d.Name == "gpu-2" {
			if modes := d.Attributes["computeModes"].StringValue; modes == nil || *modes != domain.ComputeModesTimeSlicing {
				t.Errorf("gpu-2's computeModes %v, want %s (--sm-sharing-gpus=none)", modes, domain.ComputeModesTimeSlicing)
			}
			if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
				t.Error("gpu-2 is not offered as a fraction GPU")
			}
		}
	}
	if note := waitForEvent(ctx, t, client, frac, "FractionGPULost"); !strings.Contains(note, "gpu-1") || !strings.Contains(note, "MIG mode turned on") {
		t.Errorf("FractionGPULost note %q, want it to name gpu-1 and the MIG mode", note)
	}
	if note := waitForEvent(ctx, t, client, mig, "MIGInstanceLost"); !strings.Contains(note, "gpu-2-mig-0-0") {
		t.Errorf("MIGInstanceLost note %q, want it to name gpu-2-mig-0-0", note)
	}
	// A second read of the unchanged layout reports nothing again.
	if err := plugin.CheckMIGLayout(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"gpufrac_fraction_gpus_lost_total": 1, "gpufrac_mig_instances_lost_total": 1} {
		if got := counterValue(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, c := range []*resourceapi.ResourceClaim{frac, mig} {
		if specs, _ := filepath.Glob(filepath.Join(cfg.CDIRoot, "*"+string(c.UID)+"*")); len(specs) != 1 {
			t.Errorf("claim %s's CDI spec after the change: %v, want it kept until Unprepare", c.Name, specs)
		}
	}

	// New claims meet the new layout: a fraction of gpu-1 is refused, one
	// of gpu-2 and a claim on gpu-1's instance are prepared.
	stale := shareClaim("stale", "gpu-1", "10Gi")
	onTwo := shareClaim("on-two", "gpu-2", "10Gi")
	onInstance := migClaim("on-instance", "claim-uid-on-instance", "gpu-1-mig-0-0")
	for _, c := range []*resourceapi.ResourceClaim{stale, onTwo, onInstance} {
		if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, c, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err = plugin.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{stale, onTwo, onInstance})
	if err != nil {
		t.Fatal(err)
	}
	if res[stale.UID].Err == nil {
		t.Error("a fraction of gpu-1, now in MIG mode, was prepared")
	}
	if res[onTwo.UID].Err != nil || res[onInstance.UID].Err != nil {
		t.Errorf("preparing on the new layout: gpu-2 %v, gpu-1's instance %v", res[onTwo.UID].Err, res[onInstance.UID].Err)
	}
}

// waitSlice waits until the node's one slice lists want, in order.
func waitSlice(ctx context.Context, t *testing.T, client *fake.Clientset, want []string) *resourceapi.ResourceSlice {
	t.Helper()
	var got *resourceapi.ResourceSlice
	var names []string
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		list, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			return false, nil
		}
		got, names = &list.Items[0], nil
		for _, d := range got.Spec.Devices {
			names = append(names, d.Name)
		}
		return slices.Equal(names, want), nil
	}); err != nil {
		t.Fatalf("slice devices %v, want %v", names, want)
	}
	return got
}

// counterValue reads the counter name from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no counter %s", name)
	return 0
}
