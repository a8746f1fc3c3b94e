// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// controllerText is the controller's scrape of the cluster as it stands:
// the slices every node's plugin publishes (unhealthy GPUs tainted) and
// every prepared claim as the scheduler allocated it, served to the
// controller's own cluster metrics through the admission cache it keeps.
// Each scrape builds the cache afresh from the world: the series are
// computed at scrape time from the cache, so only its contents matter.
func (w *world) controllerText(ctx context.Context) ([]byte, error) {
	var objs []runtime.Object
	for _, n := range w.nodes {
		res, err := resourceslices.DriverResourcesWithHealth(n.name, n.inv, n.unhealthy)
		if err != nil {
			return nil, fmt.Errorf("slices of %s: %w", n.name, err)
		}
		for _, s := range resourceslices.Objects(v1alpha1.DriverName, res) {
			objs = append(objs, s)
		}
		for _, c := range n.prepared {
			claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
			alloc := &resourceapi.AllocationResult{}
			for _, d := range c.Devices {
				alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{
					Request: d.Request, Driver: v1alpha1.DriverName, Pool: d.Pool, Device: d.Device, ShareID: d.ShareID,
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{
						resourceslices.MemoryCapacity: *resource.NewQuantity(d.SoftLimitBytes, resource.BinarySI)},
				})
			}
			claim.Status.Allocation = alloc
			objs = append(objs, claim)
		}
	}
	client := fake.NewClientset(objs...)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster := admission.NewInformerCluster(factory)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	// cluster.WaitForSync polls every 100 ms; a scenario scrapes the
	// controller a hundred times or more, so the same informers are
	// polled here every millisecond.
	r := factory.Resource().V1()
	synced := []cache.InformerSynced{r.ResourceSlices().Informer().HasSynced, r.DeviceClasses().Informer().HasSynced,
		r.ResourceClaimTemplates().Informer().HasSynced, r.ResourceClaims().Informer().HasSynced}
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, s := range synced {
			if !s() {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		return nil, fmt.Errorf("syncing the admission cache: %w", err)
	}
	registry := prometheus.NewRegistry()
	controller.RegisterClusterMetrics(ctx, client, factory, cluster, registry)
	return expose(registry)
}
