// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package allocator is a replica of kube-scheduler's DRA allocation: it
// places ResourceClaims on nodes with the scheduler's own
// structured allocator (k8s.io/dynamic-resource-allocation/structured, with
// consumable capacity on), the way kube-scheduler does for consecutive pods:
// node by node, remembering what earlier claims consumed. Tests use it to
// prove scheduling properties of the slices and claims gpufrac produces, and
// the simulator uses it to plan whole workloads.
package allocator

import (
	"context"
	"fmt"

	"k8s.io/utils/ptr"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Cluster is the allocator's view of a cluster.
type Cluster struct {
	nodes     []*v1.Node
	slices    []*resourceapi.ResourceSlice
	classes   ClassLister
	cache     *cel.Cache
	allocated []resourceapi.AllocationResult
	// order keeps gpufrac's slices in the plugin's device order (fill.go).
	order deviceOrder
}

// New builds a cluster from its slices and classes; the nodes are the pools'
// node names, in order of first appearance. gpufrac's slices are as given
// until an allocation is recorded; from then on each pool's devices are in
// the order the kubelet plugin publishes for what its GPUs hold (fullest
// first, resourceslices.OrderByFill), without the plugin's lag.
func New(slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass) *Cluster {
	c := &Cluster{slices: slices, classes: ClassLister{}, cache: cel.NewCache(100, cel.Features{EnableConsumableCapacity: true})}
	seen := map[string]bool{}
	for _, s := range slices {
		if s.Spec.NodeName != nil && !seen[*s.Spec.NodeName] {
			seen[*s.Spec.NodeName] = true
			c.nodes = append(c.nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: *s.Spec.NodeName}})
		}
	}
	c.slices, c.order = newDeviceOrder(slices)
	for _, cl := range classes {
		c.classes[cl.Name] = cl
	}
	return c
}

// ClassLister serves DeviceClasses from a map by name, as the scheduler's
// allocator reads them from its informer (internal/cli/why replays with it too).
type ClassLister map[string]*resourceapi.DeviceClass

// List implements the allocator's DeviceClassLister.
func (l ClassLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

// Get implements the allocator's DeviceClassLister.
func (l ClassLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, apierrors.NewNotFound(resourceapi.Resource("deviceclasses"), name)
}

// state is what earlier allocations hold, as the scheduler tracks it.
func (c *Cluster) state() structured.AllocatedState {
	return AllocatedState(c.allocated...)
}

// AllocatedState is what allocations hold, as the scheduler tracks it:
// whole devices, the shares of multi-allocatable ones and the capacity
// those shares consume. It is the state the scheduler's allocator starts
// from (structured.NewAllocator); internal/cli/why builds it from the
// cluster's allocated claims.
func AllocatedState(allocations ...resourceapi.AllocationResult) structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, a := range allocations {
		for _, r := range a.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue // as kube-scheduler's foreachAllocatedDevice: not in use
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if r.ShareID == nil {
				st.AllocatedDevices.Insert(id)
				continue
			}
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
			st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		}
	}
	return st
}

// Allocate places one pod's claims on the first node where they all fit and
// records the result. It returns nil and no error when they fit nowhere.
func (c *Cluster) Allocate(ctx context.Context, claims ...*resourceapi.ResourceClaim) ([]resourceapi.AllocationResult, string, error) {
	alloc, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true, PrioritizedList: true},
		c.state(), c.classes, c.slices, c.cache)
	if err != nil {
		return nil, "", fmt.Errorf("creating the allocator: %w", err)
	}
	for _, node := range c.nodes {
		results, err := alloc.Allocate(ctx, node, claims)
		if err != nil {
			return nil, "", fmt.Errorf("allocating on node %s: %w", node.Name, err)
		}
		if results != nil {
			c.Record(results...)
			return results, node.Name, nil
		}
	}
	return nil, "", nil
}

// Feasible lists the nodes where all the claims would fit, without
// recording anything: the scheduler's Filter phase for one pod, one
// allocator over the current state and an allocation attempt on every node
// (kube-scheduler spreads those attempts over its parallel workers and may
// stop early once it has enough feasible nodes; this tries them all, in
// one goroutine).
func (c *Cluster) Feasible(ctx context.Context, claims ...*resourceapi.ResourceClaim) ([]string, error) {
	alloc, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true, PrioritizedList: true},
		c.state(), c.classes, c.slices, c.cache)
	if err != nil {
		return nil, fmt.Errorf("creating the allocator: %w", err)
	}
	var fit []string
	for _, node := range c.nodes {
		results, err := alloc.Allocate(ctx, node, claims)
		if err != nil {
			return nil, fmt.Errorf("allocating on node %s: %w", node.Name, err)
		}
		if results != nil {
			fit = append(fit, node.Name)
		}
	}
	return fit, nil
}

// Record adds allocations made elsewhere, such as the claims a cluster
// already holds, so that later placements see their devices and capacity
// as taken.
func (c *Cluster) Record(results ...resourceapi.AllocationResult) {
	c.allocated = append(c.allocated, results...)
	c.order.record(c.slices, results)
}

// ClaimFromTemplate is the claim the resourceclaim controller would create
// from a template.
func ClaimFromTemplate(name string, tmpl *resourceapi.ResourceClaimTemplate) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tmpl.Namespace, UID: types.UID("uid-" + name)},
		Spec:       *tmpl.Spec.Spec.DeepCopy(),
	}
}
