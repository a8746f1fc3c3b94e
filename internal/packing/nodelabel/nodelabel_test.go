// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package nodelabel_test

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
)

func claim(name, node string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev",
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("16Gi")}}}}}
	if node == "" {
		return c
	}
	a := &resourceapi.AllocationResult{NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
		MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}}
	for _, d := range devices {
		a.Devices.Results = append(a.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpufrac.dev", Pool: node, Device: d})
	}
	c.Status.Allocation = a
	return c
}

func TestGPUsInUse(t *testing.T) {
	whole := claim("whole", "n1", "gpu-2")
	whole.Spec.Devices.Requests[0].Exactly.Capacity = nil
	other := claim("other", "n1", "gpu-0")
	other.Status.Allocation.Devices.Results[0].Driver = "gpu.nvidia.com"
	for _, tc := range []struct {
		name   string
		claims []*resourceapi.ResourceClaim
		want   int
		label  string
	}{
		{name: "none", want: 0, label: ""},
		{name: "unallocated", claims: []*resourceapi.ResourceClaim{claim("a", "")}, want: 0, label: ""},
		{name: "two shares of one GPU", claims: []*resourceapi.ResourceClaim{claim("a", "n1", "gpu-0"), claim("b", "n1", "gpu-0")}, want: 1, label: "1"},
		{name: "two GPUs", claims: []*resourceapi.ResourceClaim{claim("a", "n1", "gpu-0"), claim("b", "n1", "gpu-3")}, want: 2, label: "2"},
		{name: "a whole-GPU claim is not counted", claims: []*resourceapi.ResourceClaim{whole, claim("b", "n1", "gpu-1")}, want: 1, label: "1"},
		{name: "another driver's device is not counted", claims: []*resourceapi.ResourceClaim{other, claim("b", "n1", "gpu-1")}, want: 1, label: "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nodelabel.GPUsInUse(tc.claims)
			if l := nodelabel.LabelsInUse(got); got != tc.want || l != (nodelabel.Labels{GPUsInUse: tc.label}) {
				t.Errorf("GPUsInUse = %d (labels %+v), want %d (%q)", got, l, tc.want, tc.label)
			}
		})
	}
	if n := nodelabel.AllocatedNode(claim("a", "n7", "gpu-0")); n != "n7" {
		t.Errorf("AllocatedNode = %q, want n7", n)
	}
}

// TestLoopLabelsNodes runs the loop against a fake API server: the node
// with claims gets its count, the first empty GPU node is designated, a
// freed node loses its label, and a rank on a node without GPUs goes.
func TestLoopLabelsNodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slice := func(node string) *resourceapi.ResourceSlice {
		return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpus"},
			Spec: resourceapi.ResourceSliceSpec{Driver: "gpufrac.dev", NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
				Devices: []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}}}
	}
	client := fake.NewClientset(
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}},
		// No GPUs, and a stray rank (an edit by hand): it goes.
		&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3", Labels: map[string]string{nodelabel.LabelFillOrder: "2"}}},
		slice("n1"), slice("n2"),
		claim("a", "n2", "gpu-0"), claim("b", "n2", "gpu-1"))
	factory := informers.NewSharedInformerFactory(client, 0)
	loop, err := nodelabel.New(factory, client)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	done := make(chan struct{})
	go func() { loop.Run(ctx, 1); close(done) }()
	defer func() { cancel(); <-done }()

	waitLabels := func(want map[string]string) {
		t.Helper()
		var got map[string]string
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			got = map[string]string{}
			for _, n := range []string{"n1", "n2", "n3"} {
				node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
				if err != nil {
					return false, err
				}
				if v, ok := node.Labels[nodelabel.LabelGPUsInUse]; ok {
					got[n] = v
				}
				if v, ok := node.Labels[nodelabel.LabelFillOrder]; ok {
					got[n] += " rank " + v
				}
			}
			return len(got) == len(want) && got["n1"] == want["n1"] && got["n2"] == want["n2"], nil
		})
		if err != nil {
			t.Fatalf("labels %v, want %v: %v", got, want, err)
		}
	}
	waitLabels(map[string]string{"n1": "0 rank 1", "n2": "2"})

	// n1 takes a claim: it counts it and loses its rank, and no empty GPU
	// node is left.
	if _, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, claim("c", "n1", "gpu-1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLabels(map[string]string{"n1": "1", "n2": "2"})

	// n2's claims are deleted: n2 is empty again, and designated.
	for _, c := range []string{"a", "b"} {
		if err := client.ResourceV1().ResourceClaims("ns").Delete(ctx, c, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitLabels(map[string]string{"n1": "1", "n2": "0 rank 1"})
}

// TestStripClaim: the transform is shared by every reader of the
// controller's claim informer, admission's ClaimSpec among them, so it must
// keep the whole spec (a stripped spec once lost the device class, and the
// webhook no longer recognised pre-created gpufrac claims) and the
// allocation, and drop what nobody reads.
func TestStripClaim(t *testing.T) {
	full := claim("c", "node-a", "gpu-0")
	full.Labels = map[string]string{"app": "x"}
	full.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kube-scheduler", Operation: metav1.ManagedFieldsOperationApply}}
	full.OwnerReferences = []metav1.OwnerReference{{Kind: "Pod", Name: "p"}}
	full.Spec.Devices.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpufrac.dev"}}}}
	full.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p", UID: "u"}}
	full.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: "gpufrac.dev", Pool: "node-a", Device: "gpu-0"}}
	full.Status.Allocation.Devices.Results[0].ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("16Gi")}

	obj, err := nodelabel.StripClaim(full.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*resourceapi.ResourceClaim)
	if !equality.Semantic.DeepEqual(got.Spec, full.Spec) {
		t.Errorf("spec changed:\n%+v\nwant\n%+v", got.Spec, full.Spec)
	}
	if !equality.Semantic.DeepEqual(got.Status.Allocation.Devices.Results, full.Status.Allocation.Devices.Results) ||
		nodelabel.AllocatedNode(got) != "node-a" {
		t.Errorf("allocation not kept: %+v", got.Status.Allocation)
	}
	if got.Name != "c" || got.Namespace != "ns" || len(got.Labels) != 0 || len(got.ManagedFields) != 0 || len(got.OwnerReferences) != 0 ||
		len(got.Status.ReservedFor) != 0 || len(got.Status.Devices) != 0 {
		t.Errorf("kept what no reader reads: %+v", got)
	}
	if q, ok := nodelabel.FractionMemory(&got.Spec); !ok || q.Cmp(resource.MustParse("16Gi")) != 0 {
		t.Errorf("FractionMemory %v %v, want 16Gi", q.String(), ok)
	}
	if other, _ := nodelabel.StripClaim("not a claim"); other != "not a claim" {
		t.Errorf("a non-claim object changed: %v", other)
	}
}

func TestFractionMemory(t *testing.T) {
	q := func(s string) *resourceapi.CapacityRequirements {
		return &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(s)}}
	}
	for _, tc := range []struct {
		name     string
		requests []resourceapi.DeviceRequest
		want     string
		ok       bool
	}{
		{"whole GPU", []resourceapi.DeviceRequest{{Name: "a", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev"}}}, "0", false},
		{"largest of two requests", []resourceapi.DeviceRequest{
			{Name: "a", Exactly: &resourceapi.ExactDeviceRequest{Capacity: q("8Gi")}},
			{Name: "b", Exactly: &resourceapi.ExactDeviceRequest{Capacity: q("24Gi")}}}, "24Gi", true},
		{"firstAvailable: the largest subrequest", []resourceapi.DeviceRequest{{Name: "a", FirstAvailable: []resourceapi.DeviceSubRequest{
			{Name: "small", Capacity: q("10Gi")}, {Name: "big", Capacity: q("40Gi")}}}}, "40Gi", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: tc.requests}}
			got, ok := nodelabel.FractionMemory(&spec)
			if ok != tc.ok || got.Cmp(resource.MustParse(tc.want)) != 0 {
				t.Errorf("got %s %v, want %s %v", got.String(), ok, tc.want, tc.ok)
			}
		})
	}
}
