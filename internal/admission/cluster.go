// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// InformerCluster serves Cluster from shared informers.
type InformerCluster struct {
	slices    resourcelisters.ResourceSliceLister
	classes   resourcelisters.DeviceClassLister
	templates resourcelisters.ResourceClaimTemplateLister
	claims    resourcelisters.ResourceClaimLister
	synced    []cache.InformerSynced

	// sizes caches ConsistentGPUSizes until a slice changes.
	sizes sizeCache
}

// SizeReporter learns of each device whose memory is ignored for
// disagreeing with its model's other slices, once per device and size.
type SizeReporter interface {
	IgnoredSize(IgnoredSize)
}

type sizeCache struct {
	mu       sync.Mutex
	stale    bool
	sizes    []GPUSize
	ignored  []IgnoredSize
	reported map[string]bool
	reporter SizeReporter
}

// SetSizeReporter installs r; call it before serving.
func (c *InformerCluster) SetSizeReporter(r SizeReporter) {
	c.sizes.mu.Lock()
	defer c.sizes.mu.Unlock()
	c.sizes.reporter = r
}

// refreshSizes recomputes the sizes after a slice changed, and reports
// devices newly ignored. Returned slices are not to be modified.
func (c *InformerCluster) refreshSizes() ([]GPUSize, []IgnoredSize) {
	c.sizes.mu.Lock()
	defer c.sizes.mu.Unlock()
	if !c.sizes.stale && c.sizes.reported != nil {
		return c.sizes.sizes, c.sizes.ignored
	}
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil, nil
	}
	c.sizes.sizes, c.sizes.ignored = ConsistentGPUs(all)
	c.sizes.stale = false
	reported := make(map[string]bool, len(c.sizes.ignored))
	for _, i := range c.sizes.ignored {
		reported[i.key()] = true
		if !c.sizes.reported[i.key()] && c.sizes.reporter != nil {
			c.sizes.reporter.IgnoredSize(i)
		}
	}
	c.sizes.reported = reported
	return c.sizes.sizes, c.sizes.ignored
}

// IgnoredSizes is the number of devices whose memory is ignored now
// (gpufrac_resourceslice_ignored_sizes).
func (c *InformerCluster) IgnoredSizes() int {
	_, ignored := c.refreshSizes()
	return len(ignored)
}

// NewInformerCluster registers the informers it needs with factory; start
// the factory and call WaitForSync before serving.
func NewInformerCluster(factory informers.SharedInformerFactory) *InformerCluster {
	s := factory.Resource().V1().ResourceSlices()
	c := factory.Resource().V1().DeviceClasses()
	// Templates and claims: whether a pod's claim is a gpufrac one, so the
	// webhook strips NVIDIA's memory and device variables from its containers.
	t := factory.Resource().V1().ResourceClaimTemplates()
	rc := factory.Resource().V1().ResourceClaims()
	ic := &InformerCluster{
		slices: s.Lister(), classes: c.Lister(), templates: t.Lister(), claims: rc.Lister(),
		synced: []cache.InformerSynced{s.Informer().HasSynced, c.Informer().HasSynced, t.Informer().HasSynced, rc.Informer().HasSynced},
	}
	stale := func(any) {
		ic.sizes.mu.Lock()
		ic.sizes.stale = true
		ic.sizes.mu.Unlock()
	}
	_, _ = s.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: stale, UpdateFunc: func(_, obj any) { stale(obj) }, DeleteFunc: stale,
	})
	return ic
}

// WaitForSync blocks until the caches are filled; a webhook that answered
// from an empty cache would refuse every gpu-fraction pod.
func (c *InformerCluster) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for the ResourceSlice and DeviceClass caches: %w", ctx.Err())
	}
	return nil
}

// GPUMemorySizes implements Cluster: the sizes the slices of each GPU
// model agree on (ConsistentGPUs); a device publishing another is
// ignored and reported.
func (c *InformerCluster) GPUMemorySizes() []resource.Quantity {
	sizes, _ := c.refreshSizes()
	out := make([]resource.Quantity, len(sizes))
	for i := range sizes {
		out[i] = sizes[i].Capacity
	}
	return out
}

// GPUTotalsMiB implements GPUTotals: each size's GPU total in MiB, keyed
// by the size in bytes.
func (c *InformerCluster) GPUTotalsMiB() map[int64]int64 {
	sizes, _ := c.refreshSizes()
	out := make(map[int64]int64, len(sizes))
	for _, s := range sizes {
		out[s.Capacity.Value()] = s.TotalMiB
	}
	return out
}

// DeviceClasses implements Cluster.
func (c *InformerCluster) DeviceClasses() []*resourceapi.DeviceClass {
	all, err := c.classes.List(labels.Everything())
	if err != nil {
		return nil
	}
	return all
}

// ClaimSpec implements Cluster.
func (c *InformerCluster) ClaimSpec(namespace string, pc corev1.PodResourceClaim) *resourceapi.ResourceClaimSpec {
	switch {
	case pc.ResourceClaimTemplateName != nil:
		if t, err := c.templates.ResourceClaimTemplates(namespace).Get(*pc.ResourceClaimTemplateName); err == nil {
			return &t.Spec.Spec
		}
	case pc.ResourceClaimName != nil:
		if claim, err := c.claims.ResourceClaims(namespace).Get(*pc.ResourceClaimName); err == nil {
			return &claim.Spec
		}
	}
	return nil
}

// MaxGPUsPerNode implements Cluster: the largest count of gpufrac devices
// with a memory capacity in one resource pool (one node's GPUs).
func (c *InformerCluster) MaxGPUsPerNode() int {
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return 0
	}
	perPool := map[string]int{}
	for _, s := range all {
		if s.Spec.Driver != v1alpha1.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			// MIG instances (type mig) are not GPUs fractions spread over.
			if t, ok := d.Attributes[attrType]; ok && (t.StringValue == nil || *t.StringValue != "gpu") {
				continue
			}
			if _, ok := d.Capacity["memory"]; ok {
				perPool[s.Spec.Pool.Name]++
			}
		}
	}
	most := 0
	for _, n := range perPool {
		most = max(most, n)
	}
	return most
}
