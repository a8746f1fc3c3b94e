// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/deployments"
	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/cli/simulate"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
)

const (
	scaleNodes  = 1000
	scaleShares = 20000
	mib         = 1 << 20
)

// BenchmarkControllerCacheAtScale sizes what 1,000 nodes of 8 H200s cost
// in the API and in the controller (use -benchtime 1x; every iteration
// repeats the same measurement):
//
//   - the ResourceSlices one node publishes, built by the plugin's code
//     (internal/cli/simulate over go-nvml's mock H200s), as JSON and as protobuf;
//   - the heap the controller's caches take for the cluster: exactly the
//     informers controller.Run starts (admission.NewInformerCluster:
//     ResourceSlices and DeviceClasses), filled from a list decoded from
//     protobuf per request, as objects arrive off the wire; HeapInuse
//     after a GC, against a baseline taken just before;
//   - 20,000 allocated ResourceClaims in an informer's store, as decoded
//     (what kube-scheduler holds for them) and through the transform the
//     controller's claim informer applies (nodelabel.StripClaim: its
//     claim cache, which admission's ClaimSpec, the packing labels and the
//     scheduler extender share). The synthetic claims carry no managed
//     fields, which real ones do (one entry per writer), so a real
//     cluster's unstripped store is larger than measured here.
func BenchmarkControllerCacheAtScale(b *testing.B) {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
	defer cancel()
	slices, err := simulate.Cluster{Nodes: scaleNodes, GPUs: "h200x8"}.Slices(ctx)
	if err != nil {
		b.Fatal(err)
	}
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		b.Fatal(err)
	}
	var jsonBytes, protoBytes int
	for _, s := range slices {
		s.APIVersion, s.Kind = "resource.k8s.io/v1", "ResourceSlice"
		j, err := json.Marshal(s)
		if err != nil {
			b.Fatal(err)
		}
		jsonBytes += len(j)
		protoBytes += s.Size()
	}
	sliceList, err := (&resourceapi.ResourceSliceList{Items: derefAll(slices)}).Marshal()
	if err != nil {
		b.Fatal(err)
	}
	claimList, err := allocatedClaims(slices).Marshal()
	if err != nil {
		b.Fatal(err)
	}

	b.ResetTimer()
	var slicesHeap, claimsHeap, strippedHeap uint64
	for range b.N {
		slicesHeap = controllerCacheHeap(ctx, b, sliceList, classes)
		claimsHeap = claimStoreHeap(b, claimList, nil)
		strippedHeap = claimStoreHeap(b, claimList, nodelabel.StripClaim)
	}
	b.StopTimer()
	b.ReportMetric(float64(len(slices))/scaleNodes, "slices/node")
	b.ReportMetric(float64(jsonBytes)/scaleNodes, "json-bytes/node")
	b.ReportMetric(float64(protoBytes)/scaleNodes, "proto-bytes/node")
	b.ReportMetric(float64(slicesHeap)/mib, "controller-cache-MiB")
	b.ReportMetric(float64(slicesHeap)/scaleNodes, "controller-cache-bytes/node")
	b.ReportMetric(float64(claimsHeap)/mib, "20k-claims-store-MiB")
	b.ReportMetric(float64(strippedHeap)/mib, "20k-claims-stripped-MiB")
}

// controllerCacheHeap starts the controller's informers over a client
// that lists the encoded slices and returns the heap they keep.
func controllerCacheHeap(ctx context.Context, b *testing.B, sliceList []byte, classes []*resourceapi.DeviceClass) uint64 {
	objs := make([]runtimeapi.Object, len(classes))
	for i, c := range classes {
		objs[i] = c
	}
	client := fake.NewClientset(objs...)
	client.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtimeapi.Object, error) {
		var l resourceapi.ResourceSliceList
		return true, &l, l.Unmarshal(sliceList)
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := heapInuse()
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster := admission.NewInformerCluster(factory)
	factory.Start(ctx.Done())
	if err := cluster.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	if got := len(cluster.GPUMemorySizes()); got != 1 {
		b.Fatalf("the cache holds %d GPU sizes, want 1 (141Gi)", got)
	}
	after := heapInuse()
	runtime.KeepAlive(cluster)
	cancel()
	factory.Shutdown()
	return after - before
}

// claimStoreHeap decodes the claims into an informer's store, keyed and
// indexed as an informer keeps them, through transform when it is set
// (as cache.SharedIndexInformer.SetTransform applies it), and returns the
// heap they take.
func claimStoreHeap(b *testing.B, claimList []byte, transform cache.TransformFunc) uint64 {
	before := heapInuse()
	var l resourceapi.ResourceClaimList
	if err := l.Unmarshal(claimList); err != nil {
		b.Fatal(err)
	}
	store := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	for i := range l.Items {
		var obj any = &l.Items[i]
		if transform != nil {
			var err error
			if obj, err = transform(obj); err != nil {
				b.Fatal(err)
			}
		}
		if err := store.Add(obj); err != nil {
			b.Fatal(err)
		}
	}
	l = resourceapi.ResourceClaimList{}
	after := heapInuse()
	runtime.KeepAlive(store)
	return after - before
}

// heapInuse after two collections, so that what is left is live.
func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func derefAll(slices []*resourceapi.ResourceSlice) []resourceapi.ResourceSlice {
	out := make([]resourceapi.ResourceSlice, len(slices))
	for i, s := range slices {
		out[i] = *s
	}
	return out
}

// allocatedClaims are scaleShares claims of the benchmark's trace,
// allocated round-robin over the cluster's GPUs and reserved for a pod,
// as the API server would hold them.
func allocatedClaims(slices []*resourceapi.ResourceSlice) *resourceapi.ResourceClaimList {
	pods := simulate.Pods(simulate.Generate(scaleShares, 1, resource.MustParse("141Gi")))
	list := &resourceapi.ResourceClaimList{}
	for i, p := range pods {
		s := slices[i%len(slices)]
		dev := s.Spec.Devices[(i/len(slices))%len(s.Spec.Devices)]
		uid := types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
		share := types.UID(fmt.Sprintf("11111111-0000-0000-0000-%012d", i))
		req := p.Claims[0].Devices.Requests[0].Exactly
		consumed := map[resourceapi.QualifiedName]resource.Quantity{"memory": dev.Capacity["memory"].Value}
		if req.Capacity != nil {
			consumed = req.Capacity.Requests
		}
		list.Items = append(list.Items, resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name + "-gpu-x7k2q", Namespace: "inference", UID: uid, ResourceVersion: "123456",
				GenerateName: p.Name + "-gpu-", OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: uid}},
				Annotations: map[string]string{"resource.kubernetes.io/pod-claim-name": "gpu"}},
			Spec: p.Claims[0],
			Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{
					Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
						Request: "gpu", Driver: s.Spec.Driver, Pool: s.Spec.Pool.Name, Device: dev.Name,
						ShareID: &share, ConsumedCapacity: consumed,
					}}},
					// What the scheduler writes for a node-local device.
					NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{*s.Spec.NodeName}}}}}},
				},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: p.Name, UID: uid}},
			},
		})
	}
	return list
}
