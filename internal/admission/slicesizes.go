// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// One node's slices must not change the rules for every other node's
// pods: the GPU sizes admission and KAI translation use (the "largest GPU"
// bound, one subrequest per size) come from every slice in the cluster, and
// the node-scoped admission policy lets a node write its own slices,
// bounded, but not lie consistently with the others. So a size counts only
// where it agrees with the other slices of the same GPU model (DESIGN.md,
// "What a slice's memory means"): per productName, the size most pools
// publish wins (a tie goes to the smallest, the stricter bound), and a
// device publishing another size is ignored and reported. No built-in
// catalogue of models decides what is plausible: it would refuse every GPU
// not listed.

// Attribute names read here, as the node publishes them
// (internal/core/resourceslices; the package is not imported, so
// admission stays independent of the node side).
const (
	attrProductName = "productName"
	attrType        = "type"
)

// IgnoredSize is one device whose memory differs from what the other
// slices of its model agree on.
type IgnoredSize struct {
	Slice   *resourceapi.ResourceSlice
	Device  string
	Product string
	// Size is what the device publishes; Agreed what its model's other
	// pools do.
	Size, Agreed resource.Quantity
}

// key identifies the report of one ignored device at one size.
func (i IgnoredSize) key() string {
	return i.Slice.Name + "/" + i.Device + "=" + i.Size.String()
}

// sizeVotes counts, for one model, the pools publishing each size.
type sizeVotes struct {
	size  resource.Quantity
	pools map[string]bool
}

// ConsistentGPUSizes returns the distinct GPU memory sizes of the gpufrac
// slices in all (smallest first) that agree with the other slices of the
// same productName, and the devices ignored for disagreeing.
func ConsistentGPUSizes(all []*resourceapi.ResourceSlice) ([]resource.Quantity, []IgnoredSize) {
	votes := map[string][]*sizeVotes{}
	eachGPU(all, func(s *resourceapi.ResourceSlice, d *resourceapi.Device, product string, size resource.Quantity) {
		vs := votes[product]
		i := slices.IndexFunc(vs, func(v *sizeVotes) bool { return v.size.Cmp(size) == 0 })
		if i < 0 {
			vs = append(vs, &sizeVotes{size: size, pools: map[string]bool{}})
			i = len(vs) - 1
			votes[product] = vs
		}
		vs[i].pools[s.Spec.Pool.Name] = true
	})
	agreed := map[string]resource.Quantity{}
	for product, vs := range votes {
		slices.SortFunc(vs, func(a, b *sizeVotes) int {
			if n := len(b.pools) - len(a.pools); n != 0 {
				return n
			}
			return a.size.Cmp(b.size)
		})
		agreed[product] = vs[0].size
	}
	var sizes []resource.Quantity
	var ignored []IgnoredSize
	eachGPU(all, func(s *resourceapi.ResourceSlice, d *resourceapi.Device, product string, size resource.Quantity) {
		want := agreed[product]
		if size.Cmp(want) != 0 {
			ignored = append(ignored, IgnoredSize{Slice: s, Device: d.Name, Product: product, Size: size, Agreed: want})
			return
		}
		if !slices.ContainsFunc(sizes, func(q resource.Quantity) bool { return q.Cmp(size) == 0 }) {
			sizes = append(sizes, size)
		}
	})
	slices.SortFunc(sizes, func(a, b resource.Quantity) int { return a.Cmp(b) })
	slices.SortFunc(ignored, func(a, b IgnoredSize) int { return strings.Compare(a.key(), b.key()) })
	return sizes, ignored
}

// eachGPU calls f for every device of a gpufrac slice that is a fraction
// target: a memory capacity, and type gpu where the type is published.
func eachGPU(all []*resourceapi.ResourceSlice, f func(*resourceapi.ResourceSlice, *resourceapi.Device, string, resource.Quantity)) {
	for _, s := range all {
		if s.Spec.Driver != v1alpha1.DriverName {
			continue
		}
		for i := range s.Spec.Devices {
			d := &s.Spec.Devices[i]
			capacity, ok := d.Capacity["memory"]
			if !ok {
				continue
			}
			if t, ok := d.Attributes[attrType]; ok && (t.StringValue == nil || *t.StringValue != "gpu") {
				continue
			}
			var product string
			if p, ok := d.Attributes[attrProductName]; ok && p.StringValue != nil {
				product = *p.StringValue
			}
			f(s, d, product, capacity.Value)
		}
	}
}
