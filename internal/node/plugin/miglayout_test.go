// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
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
