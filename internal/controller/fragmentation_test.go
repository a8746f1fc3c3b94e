// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// TestFragmentationMetric: the gauges say, per GPU pool, what `status`
// says: three H100s hold 10, 20 and 60Gi; two GPUs would do (90Gi over
// 80Gi), and moving the 10Gi share beside the 60Gi one frees its GPU.
func TestFragmentationMetric(t *testing.T) {
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}
	model := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"productName": {StringValue: ptr.To("H100")}}
	objs := []runtime.Object{&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpufrac.dev", NodeName: ptr.To("n1"), Pool: resourceapi.ResourcePool{Name: "n1", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0", Attributes: model, Capacity: capacity}, {Name: "gpu-1", Attributes: model, Capacity: capacity},
			{Name: "gpu-2", Attributes: model, Capacity: capacity}, {Name: "gpu-3", Attributes: model, Capacity: capacity}}}}}
	for i, memory := range []string{"10Gi", "20Gi", "60Gi"} {
		name := []string{"a", "b", "c"}[i]
		objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"}, Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: "gpufrac.dev", Pool: "n1", Device: []string{"gpu-0", "gpu-1", "gpu-2"}[i], ShareID: ptr.To(types.UID(name)),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}}}}}})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	c := newFragmentationCollector(factory)
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	want := `
# HELP gpufrac_fragmentation_gpus_freeable GPUs of the pool whose shares would all fit into free memory of its other GPUs in use (greedy, smallest first): what moving shares could free; a report, nothing is evicted.
# TYPE gpufrac_fragmentation_gpus_freeable gauge
gpufrac_fragmentation_gpus_freeable{pool="H100"} 1
# HELP gpufrac_fragmentation_gpus_in_use GPUs of the pool that hold at least one allocated share.
# TYPE gpufrac_fragmentation_gpus_in_use gauge
gpufrac_fragmentation_gpus_in_use{pool="H100"} 3
# HELP gpufrac_fragmentation_gpus_lower_bound The fewest GPUs the pool's allocated shares could occupy: their guaranteed memory over the pool's GPU memory, rounded up.
# TYPE gpufrac_fragmentation_gpus_lower_bound gauge
gpufrac_fragmentation_gpus_lower_bound{pool="H100"} 2
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
