// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"context"
	"fmt"
	"sort"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission"
)

// gpuSlice is node's slice of n GPUs of one model, each offering memory.
func gpuSlice(node, product, memory string, n int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpufrac.dev"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpufrac.dev", NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		},
	}
	for i := range n {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"productName": {StringValue: ptr.To(product)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(memory)}},
		})
	}
	return s
}

// reports records what a SizeReporter is told.
type reports []admission.IgnoredSize

func (r *reports) IgnoredSize(i admission.IgnoredSize) { *r = append(*r, i) }

func sizesOf(ctx context.Context, t *testing.T, r admission.SizeReporter, slices ...*resourceapi.ResourceSlice) []string {
	t.Helper()
	client := fake.NewClientset()
	for _, s := range slices {
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster := admission.NewInformerCluster(factory)
	cluster.SetSizeReporter(r)
	factory.Start(ctx.Done())
	// Shutdown waits for the informers, which end with ctx.
	defer factory.Shutdown()
	defer cancel()
	if err := cluster.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, q := range cluster.GPUMemorySizes() {
		out = append(out, q.String())
	}
	sort.Strings(out)
	return out
}

// TestHostileSliceSizes: one node's slice cannot change the GPU sizes the
// whole cluster's admission uses. A size that differs from the other
// slices of the same productName is ignored (DESIGN.md, "What a slice's
// memory means"); models seen once, or agreeing, count as they are.
func TestHostileSliceSizes(t *testing.T) {
	const h200 = "NVIDIA H200"
	for _, tc := range []struct {
		name   string
		slices []*resourceapi.ResourceSlice
		want   []string
		// ignored: the devices reported, as slice/device.
		ignored int
	}{
		{"one node publishes 1e30 for a model two others publish as 141Gi",
			[]*resourceapi.ResourceSlice{gpuSlice("n1", h200, "141Gi", 8), gpuSlice("n2", h200, "141Gi", 8), gpuSlice("evil", h200, "1e30", 1)},
			[]string{"141Gi"}, 1},
		{"one node publishes 1Ti for a model another publishes as 141Gi, eight GPUs each",
			[]*resourceapi.ResourceSlice{gpuSlice("n1", h200, "141Gi", 8), gpuSlice("evil", h200, "1Ti", 8)},
			[]string{"141Gi"}, 8},
		{"two models, each consistent, both count",
			[]*resourceapi.ResourceSlice{gpuSlice("n1", h200, "141Gi", 8), gpuSlice("n2", "NVIDIA A100-SXM4-80GB", "80Gi", 8)},
			[]string{"141Gi", "80Gi"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var r reports
			got := sizesOf(ctx, t, &r, tc.slices...)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("GPU sizes %v, want %v", got, tc.want)
			}
			if len(r) != tc.ignored {
				t.Errorf("%d devices reported ignored, want %d: %v", len(r), tc.ignored, r)
			}
			for _, i := range r {
				if *i.Slice.Spec.NodeName != "evil" || i.Agreed.String() != "141Gi" {
					t.Errorf("reported %s/%s (%s, agreed %s), want evil's devices against 141Gi", i.Slice.Name, i.Device, i.Size.String(), i.Agreed.String())
				}
			}
		})
	}
}
