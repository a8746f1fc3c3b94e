// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// deviceOrder follows the kubelet plugin's device order: the plugin
// publishes each slice's GPUs fullest first (resourceslices.OrderByFill
// over the guaranteed memory of its prepared claims), and kube-scheduler's
// allocator takes the first device in slice order that fits. The replica
// orders from the recorded allocations, as the plugin would once it has
// prepared them: it models the plugin without its lag (a burst that lands
// before the plugin republishes sees the older order; docs/metrics.md).
type deviceOrder struct {
	// base are gpufrac's slices as given, indexed like Cluster.slices; the
	// order is always computed from them, as the plugin computes it from
	// the slices it builds, so ties keep the built order.
	base []*resourceapi.ResourceSlice
	// byPool are the indices of each gpufrac pool's slices.
	byPool map[string][]int
	// used is the guaranteed memory per pool and device.
	used map[string]map[string]int64
}

// newDeviceOrder copies the slice list (entries get replaced, the caller's
// list and objects are never changed).
func newDeviceOrder(slices []*resourceapi.ResourceSlice) ([]*resourceapi.ResourceSlice, deviceOrder) {
	o := deviceOrder{base: slices, byPool: map[string][]int{}, used: map[string]map[string]int64{}}
	for i, s := range slices {
		if s.Spec.Driver == v1alpha1.DriverName {
			o.byPool[s.Spec.Pool.Name] = append(o.byPool[s.Spec.Pool.Name], i)
		}
	}
	return append([]*resourceapi.ResourceSlice(nil), slices...), o
}

// record adds what results consume and reorders the pools they touch in
// current.
func (o *deviceOrder) record(current []*resourceapi.ResourceSlice, results []resourceapi.AllocationResult) {
	touched := map[string]bool{}
	for _, a := range results {
		for _, r := range a.Devices.Results {
			if r.Driver != v1alpha1.DriverName || o.byPool[r.Pool] == nil {
				continue
			}
			n := o.capacity(r.Pool, r.Device)
			if r.ShareID != nil {
				q := r.ConsumedCapacity[resourceslices.MemoryCapacity]
				n = q.Value()
			}
			if o.used[r.Pool] == nil {
				o.used[r.Pool] = map[string]int64{}
			}
			o.used[r.Pool][r.Device] += n
			touched[r.Pool] = true
		}
	}
	for pool := range touched {
		for _, i := range o.byPool[pool] {
			ordered := *o.base[i]
			ordered.Spec.Devices, _ = resourceslices.OrderByFill(o.base[i].Spec.Devices, o.used[pool])
			current[i] = &ordered
		}
	}
}

// capacity is a device's memory: what a whole (unshared) allocation takes.
func (o *deviceOrder) capacity(pool, device string) int64 {
	for _, i := range o.byPool[pool] {
		for _, d := range o.base[i].Spec.Devices {
			if d.Name == device {
				return resourceslices.CapacityBytes(d)
			}
		}
	}
	return 0
}
