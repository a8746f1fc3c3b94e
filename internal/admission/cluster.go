// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"fmt"
	"slices"

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
	return &InformerCluster{
		slices: s.Lister(), classes: c.Lister(), templates: t.Lister(), claims: rc.Lister(),
		synced: []cache.InformerSynced{s.Informer().HasSynced, c.Informer().HasSynced, t.Informer().HasSynced, rc.Informer().HasSynced},
	}
}

// WaitForSync blocks until the caches are filled; a webhook that answered
// from an empty cache would refuse every gpu-fraction pod.
func (c *InformerCluster) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for the ResourceSlice and DeviceClass caches: %w", ctx.Err())
	}
	return nil
}

// GPUMemorySizes implements Cluster.
func (c *InformerCluster) GPUMemorySizes() []resource.Quantity {
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil
	}
	var sizes []resource.Quantity
	for _, s := range all {
		if s.Spec.Driver != v1alpha1.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			capacity, ok := d.Capacity["memory"]
			if !ok || slices.ContainsFunc(sizes, func(q resource.Quantity) bool { return q.Cmp(capacity.Value) == 0 }) {
				continue
			}
			sizes = append(sizes, capacity.Value)
		}
	}
	return sizes
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
