// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package fragmentation

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// Collect lists gpufrac's fraction-target GPUs (type gpu, or no type) of
// slices with the shares that the allocated claims hold there. A share
// whose consumed memory is outside (0, capacity] (the API server accepts
// any figure in a status) is left out rather than added up; an unshared
// allocation holds the whole GPU.
func Collect(slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) []GPU {
	type key struct{ pool, device string }
	index := map[key]int{}
	var gpus []GPU
	for _, s := range slices {
		if s.Spec.Driver != v1alpha1.DriverName || s.Spec.NodeName == nil {
			continue
		}
		for _, d := range s.Spec.Devices {
			if !resourceslices.IsFractionTarget(&d) {
				continue
			}
			k := key{s.Spec.Pool.Name, d.Name}
			if _, dup := index[k]; dup {
				continue
			}
			g := GPU{Pool: ptr.Deref(d.Attributes[resourceslices.AttrProductName].StringValue, "unknown"),
				Node: *s.Spec.NodeName, Device: d.Name, Capacity: resourceslices.CapacityBytes(d)}
			for _, t := range d.Taints {
				g.Tainted = g.Tainted || t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute
			}
			index[k] = len(gpus)
			gpus = append(gpus, g)
		}
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			i, ok := index[key{r.Pool, r.Device}]
			if r.Driver != v1alpha1.DriverName || !ok {
				continue
			}
			g := &gpus[i]
			n := g.Capacity
			if r.ShareID != nil {
				q := r.ConsumedCapacity[resourceslices.MemoryCapacity]
				n = q.Value()
			}
			if n <= 0 || n > g.Capacity {
				continue
			}
			g.Guaranteed += n
			g.Shares = append(g.Shares, n)
		}
	}
	return gpus
}
