// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices

import (
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
)

// CapacityBytes is d's published memory capacity in bytes (0 without one).
func CapacityBytes(d resourceapi.Device) int64 {
	c, ok := d.Capacity[MemoryCapacity]
	if !ok {
		return 0
	}
	return c.Value.Value()
}

// OrderByFill puts the fraction-target devices of devices fullest first:
// least free memory (capacity less used, bytes guaranteed to the shares on
// the device by name) first, ties in their present order. kube-scheduler's
// allocator takes the first device in slice order that fits (pools by
// name, slices by name, devices in slice order), so in this order its
// first fit is a best fit. Other devices (MIG instances) keep their
// positions, and every device keeps its name and content: allocations and
// checkpoints name devices, never positions. It returns a new slice and
// whether the order differs from devices'.
func OrderByFill(devices []resourceapi.Device, used map[string]int64) ([]resourceapi.Device, bool) {
	var positions []int
	for i := range devices {
		if IsFractionTarget(&devices[i]) {
			positions = append(positions, i)
		}
	}
	targets := make([]int, len(positions))
	copy(targets, positions)
	free := func(i int) int64 { return CapacityBytes(devices[i]) - used[devices[i].Name] }
	slices.SortStableFunc(targets, func(a, b int) int {
		switch fa, fb := free(a), free(b); {
		case fa < fb:
			return -1
		case fa > fb:
			return 1
		}
		return 0
	})
	out := slices.Clone(devices)
	changed := false
	for k, pos := range positions {
		out[pos] = devices[targets[k]]
		changed = changed || targets[k] != pos
	}
	return out, changed
}

// OrderResources orders the devices of every slice of res by fill
// (OrderByFill), used keyed by device name; res must be freshly built
// (DriverResourcesWithHealth: GPU index order), so that ties, and an empty
// node, keep the built order and the published order is a function of the
// fill alone. A device never
// moves to another slice: that would take a new pool generation and leave
// the pool incomplete for the scheduler until every slice is rewritten;
// with at most MaxDevicesPerSlice GPUs a node has one slice and the order
// covers all its GPUs.
func OrderResources(res resourceslice.DriverResources, used map[string]int64) resourceslice.DriverResources {
	out := resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(res.Pools))}
	for name, pool := range res.Pools {
		ordered := pool
		ordered.Slices = make([]resourceslice.Slice, len(pool.Slices))
		for i, s := range pool.Slices {
			s.Devices, _ = OrderByFill(s.Devices, used)
			ordered.Slices[i] = s
		}
		out.Pools[name] = ordered
	}
	return out
}
