// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// shareClaim is a claim allocated a share of memory on device of this node.
func shareClaim(name, device, memory string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev"},
		}}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: "gpufrac.dev", Pool: nodeName, Device: device,
				ShareID:          ptr.To(types.UID("share-" + name)),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)},
			}}},
		}},
	}
}

// orderNode is a plugin on a simulated h200x4 node that reorders with
// interval, with the slice Updates the API server received.
type orderNode struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	plugin *nodeplugin.Plugin
	mu     sync.Mutex
	// updates are the device orders of the slice Updates, with their times.
	updates []sliceUpdate
}

type sliceUpdate struct {
	at    time.Time
	order []string
}

func startOrderNode(t *testing.T, interval time.Duration, dataDir string) *orderNode {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	n := &orderNode{t: t, ctx: ctx, client: fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})}
	n.start(interval, dataDir)
	return n
}

// start starts the plugin (again) on n's client, with its data under
// dataDir ("" for a fresh one).
func (n *orderNode) start(interval time.Duration, dataDir string) {
	t := n.t
	t.Helper()
	if n.plugin == nil {
		n.watchUpdates()
	}
	sim, err := gpusim.NewNode("h200x4", nodeName, domain.EnforcementDMem)
	if err != nil {
		t.Fatal(err)
	}
	root := dataDir
	if root == "" {
		root = shortTempDir(t)
	}
	cfg := nodeplugin.Config{
		NodeName: nodeName, KubeClient: n.client, NVML: sim.NVML, InventoryOptions: sim.InventoryOptions,
		PluginDataDir: filepath.Join(root, "plugin"), RegistrarDir: filepath.Join(root, "registry"), CDIRoot: filepath.Join(root, "cdi"),
		CDI: cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode}, BootID: "boot-1",
		Health:             nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
		SliceOrderInterval: interval,
		OnFatal:            func(err error) { t.Errorf("fatal plugin error: %v", err) },
	}
	n.plugin, err = nodeplugin.Start(n.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.plugin.Stop)
}

// watchUpdates records the device order of every slice Update, and names
// created slices as the API server does (the fake clientset ignores
// generateName, and a slice without the controller's name prefix would be
// replaced, not updated).
func (n *orderNode) watchUpdates() {
	created := 0
	n.client.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice)
		if s.Name == "" && s.GenerateName != "" {
			created++
			s.Name = fmt.Sprintf("%s%05d", s.GenerateName, created)
		}
		return false, nil, nil
	})
	n.client.PrependReactor("update", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceSlice)
		n.mu.Lock()
		n.updates = append(n.updates, sliceUpdate{at: time.Now(), order: deviceNames(s.Spec.Devices)})
		n.mu.Unlock()
		return false, nil, nil
	})
}

func deviceNames(devs []resourceapi.Device) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.Name
	}
	return out
}

// slice is the node's one published slice.
func (n *orderNode) slice() *resourceapi.ResourceSlice {
	list, err := n.client.ResourceV1().ResourceSlices().List(n.ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		return nil
	}
	return &list.Items[0]
}

func (n *orderNode) waitOrder(want ...string) *resourceapi.ResourceSlice {
	n.t.Helper()
	var s *resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(n.ctx, 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		s = n.slice()
		return s != nil && slices.Equal(deviceNames(s.Spec.Devices), want), nil
	})
	if err != nil {
		got := []string{}
		if s != nil {
			got = deviceNames(s.Spec.Devices)
		}
		n.t.Fatalf("published order %v, want %v", got, want)
	}
	return s
}

func (n *orderNode) prepare(claims ...*resourceapi.ResourceClaim) {
	n.t.Helper()
	for _, c := range claims {
		if _, err := n.client.ResourceV1().ResourceClaims(c.Namespace).Create(n.ctx, c, metav1.CreateOptions{}); err != nil {
			n.t.Fatal(err)
		}
	}
	res, err := n.plugin.PrepareResourceClaims(n.ctx, claims)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, c := range claims {
		if r := res[c.UID]; r.Err != nil || len(r.Devices) != 1 {
			n.t.Fatalf("prepare %s: %+v", c.Name, r)
		}
	}
}

func (n *orderNode) unprepare(claims ...*resourceapi.ResourceClaim) {
	n.t.Helper()
	refs := make([]kubeletplugin.NamespacedObject, len(claims))
	for i, c := range claims {
		refs[i] = kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID}
	}
	res, err := n.plugin.UnprepareResourceClaims(n.ctx, refs)
	if err != nil {
		n.t.Fatal(err)
	}
	for _, c := range claims {
		if res[c.UID] != nil {
			n.t.Fatalf("unprepare %s: %v", c.Name, res[c.UID])
		}
	}
}

// TestSliceFollowsPreparedClaims: the published slice lists the GPUs
// fullest first as claims are prepared and unprepared; only the order
// changes (names, attributes, capacity and taints stay), and the prepared
// claims survive a plugin restart that publishes their order again.
func TestSliceFollowsPreparedClaims(t *testing.T) {
	root := shortTempDir(t)
	n := startOrderNode(t, 20*time.Millisecond, root)
	empty := n.waitOrder("gpu-0", "gpu-1", "gpu-2", "gpu-3")
	byName := map[string]resourceapi.Device{}
	for _, d := range empty.Spec.Devices {
		byName[d.Name] = d
	}

	a, b := shareClaim("a", "gpu-2", "100Gi"), shareClaim("b", "gpu-1", "20Gi")
	n.prepare(a, b)
	s := n.waitOrder("gpu-2", "gpu-1", "gpu-0", "gpu-3")
	for _, d := range s.Spec.Devices {
		if !apiequality.Semantic.DeepEqual(d, byName[d.Name]) {
			t.Errorf("device %s changed beyond its position:\nbefore %+v\nafter  %+v", d.Name, byName[d.Name], d)
		}
	}
	c := shareClaim("c", "gpu-3", "130Gi")
	n.prepare(c)
	n.waitOrder("gpu-3", "gpu-2", "gpu-1", "gpu-0")
	n.unprepare(a)
	n.waitOrder("gpu-3", "gpu-1", "gpu-0", "gpu-2")

	// A restart publishes the recovered claims' order at once, and they
	// are still prepared: a repeated Prepare gets the same device.
	n.plugin.Stop()
	if err := n.client.ResourceV1().ResourceSlices().Delete(n.ctx, n.slice().Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n.start(20*time.Millisecond, root)
	n.waitOrder("gpu-3", "gpu-1", "gpu-0", "gpu-2")
	res, err := n.plugin.PrepareResourceClaims(n.ctx, []*resourceapi.ResourceClaim{c})
	if err != nil || res[c.UID].Err != nil || len(res[c.UID].Devices) != 1 || res[c.UID].Devices[0].DeviceName != "gpu-3" {
		t.Errorf("claim c after the restart: %+v, %v; want it prepared on gpu-3", res[c.UID], err)
	}
}

// TestSliceReorderIsRateLimited: a burst of Prepares within one interval
// costs at most one reorder Update per interval, and the last Update holds
// the order of every claim of the burst.
func TestSliceReorderIsRateLimited(t *testing.T) {
	const interval = 300 * time.Millisecond
	n := startOrderNode(t, interval, "")
	n.waitOrder("gpu-0", "gpu-1", "gpu-2", "gpu-3")
	start := time.Now()
	for i := range 12 {
		n.prepare(shareClaim(fmt.Sprintf("burst-%d", i), fmt.Sprintf("gpu-%d", 3-i%3), "8Gi"))
		time.Sleep(10 * time.Millisecond)
	}
	// gpu-3, gpu-2 and gpu-1 hold 32Gi each; ties keep index order.
	n.waitOrder("gpu-1", "gpu-2", "gpu-3", "gpu-0")
	time.Sleep(2 * interval) // nothing more may come
	elapsed := time.Since(start)
	n.mu.Lock()
	defer n.mu.Unlock()
	var reorders []sliceUpdate
	for _, u := range n.updates {
		if !u.at.Before(start) {
			reorders = append(reorders, u)
		}
	}
	// The controller sends each publish on its own queue, so the Updates
	// are counted, not timed: one per interval, and the first at once.
	if limit := 1 + int(elapsed/interval); len(reorders) > limit || len(reorders) == 0 {
		t.Fatalf("%d slice Updates in %v, want 1 to %d (one per %v)", len(reorders), elapsed, limit, interval)
	}
	if last := reorders[len(reorders)-1].order; !slices.Equal(last, []string{"gpu-1", "gpu-2", "gpu-3", "gpu-0"}) {
		t.Errorf("last Update has order %v, want the burst's final order", last)
	}
	t.Logf("12 Prepares over %v: %d reorder Updates", elapsed.Round(time.Millisecond), len(reorders))
}

// TestSliceOrderOff: interval 0 keeps GPU index order whatever is prepared,
// and writes no Update.
func TestSliceOrderOff(t *testing.T) {
	n := startOrderNode(t, 0, "")
	n.waitOrder("gpu-0", "gpu-1", "gpu-2", "gpu-3")
	n.prepare(shareClaim("a", "gpu-3", "100Gi"))
	time.Sleep(200 * time.Millisecond)
	n.waitOrder("gpu-0", "gpu-1", "gpu-2", "gpu-3")
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.updates) != 0 {
		t.Errorf("%d slice Updates with ordering off, want 0", len(n.updates))
	}
}
