// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// nodeDiag is everything found on one node for the pending claims.
type nodeDiag struct {
	node  string
	fits  bool
	diags []altDiag
}

// explainPending fills the node verdicts and suggestions for the
// unallocated claims.
func (w *world) explainPending(ctx context.Context, pod *v1.Pod, pending []*resourceapi.ResourceClaim, out *Explanation) error {
	nodes, excluded := w.candidates(pod)
	var missing []string
	for _, c := range pending {
		for _, group := range alts(c) {
			for _, a := range group {
				if _, ok := w.classes[a.class]; !ok {
					missing = append(missing, a.class)
				}
			}
		}
	}
	if len(missing) > 0 {
		// The scheduler cannot allocate without the class either; say so
		// rather than replay something it would not run.
		msg := fmt.Sprintf("DeviceClass %s not found (or not readable): the scheduler cannot allocate a request of a class it does not have", strings.Join(sets.List(sets.New(missing...)), ", "))
		for _, n := range nodes {
			out.Nodes = append(out.Nodes, NodeResult{Node: n, Reasons: []Reason{{Code: SelectorExcludes, Message: msg}}})
		}
		out.Nodes = append(out.Nodes, excluded...)
		return nil
	}
	fits, err := w.fitsOn(ctx, nodes, pending, nil)
	if err != nil {
		return err
	}
	used, _ := w.used(nil)
	var diags []nodeDiag
	for _, n := range nodes {
		nd := nodeDiag{node: n}
		res := NodeResult{Node: n}
		for _, c := range pending {
			for _, group := range alts(c) {
				var groupReasons []Reason
				groupFits := false
				for _, a := range group {
					d := w.diagnose(ctx, n, a, used)
					nd.diags = append(nd.diags, d)
					if res.GPUs == nil {
						res.GPUs = d.gpus
					}
					if d.fits {
						groupFits = true
					} else if d.reason != nil {
						groupReasons = append(groupReasons, *d.reason)
					}
				}
				if !groupFits {
					res.Reasons = append(res.Reasons, groupReasons...)
				}
			}
		}
		if results, ok := fits[n]; ok {
			refusals := w.refusals(n, pending, results)
			if len(refusals) == 0 {
				res.Fits, nd.fits = true, true
				res.Reasons = nil
				out.FitsOn = append(out.FitsOn, n)
			} else {
				res.Reasons = refusals
			}
		} else if len(res.Reasons) == 0 {
			res.Reasons = []Reason{{Code: Combination, Message: "each request fits here alone, but not all of the pod's requests together " +
				"(their constraints, or several requests competing for the same GPUs)"}}
		}
		out.Nodes = append(out.Nodes, res)
		diags = append(diags, nd)
	}
	out.Nodes = append(out.Nodes, excluded...)
	sort.SliceStable(out.Nodes, func(i, j int) bool { return out.Nodes[i].Node < out.Nodes[j].Node })
	if len(out.FitsOn) == 0 {
		out.Blocked = blocked(pending, diags)
		out.Suggestions, err = w.suggest(ctx, nodes, pending, diags)
		if err != nil {
			return err
		}
	}
	return nil
}

// refusals are the reasons node's plugin would refuse to prepare the
// claims allocated as results: the plugin's own planning code
// (internal/core/plan), run over the node's published attributes, is the oracle.
func (w *world) refusals(node string, claims []*resourceapi.ResourceClaim, results []resourceapi.AllocationResult) []Reason {
	var out []Reason
	for i, c := range claims {
		if i >= len(results) {
			break
		}
		alloc := c.DeepCopy()
		alloc.Status.Allocation = &results[i]
		for _, msg := range w.planErrors(node, alloc) {
			out = append(out, Reason{Code: NodeRefuses, Claim: c.Namespace + "/" + c.Name,
				Message: "the allocator would place the claim here, but the node's plugin refuses to prepare it: " + msg})
		}
	}
	return out
}

// planErrors runs the plugin's planning for an allocated claim on node, with
// the inventory the node's slice publishes.
func (w *world) planErrors(node string, claim *resourceapi.ResourceClaim) []string {
	inv := w.inventory(node)
	if inv == nil {
		return nil
	}
	_, err := plan.Compute(claim, inv, plan.Options{NodeName: node, MPSRoot: "/run/gpufrac/mps"})
	var invalid *plan.InvalidError
	if !errors.As(err, &invalid) {
		return nil
	}
	var out []string
	for _, e := range invalid.Errs {
		out = append(out, e.Error())
	}
	return out
}

// inventory rebuilds what the node's plugin discovered from the attributes
// it published: the GPUs (index, UUID, memory, compute-mode policy), the
// enforcement and the MPS version, which is all planning reads.
func (w *world) inventory(node string) *domain.Inventory {
	keys := w.nodeDevices(node)
	if len(keys) == 0 {
		return nil
	}
	inv := &domain.Inventory{}
	for _, k := range keys {
		d := w.devices[k].dev
		if resourceslices.DeviceType(&d) == domain.DeviceTypeMIG {
			if m, ok := migFromSlice(d, k.device); ok {
				inv.MIGDevices = append(inv.MIGDevices, m)
			}
			continue
		}
		idx := -1
		if a, ok := d.Attributes[resourceslices.AttrIndex]; ok && a.IntValue != nil {
			idx = int(*a.IntValue)
		}
		if domain.DeviceName(idx) != k.device {
			continue // not a device this plugin's planning would know
		}
		inv.GPUs = append(inv.GPUs, domain.GPU{UUID: stringAttr(d, resourceslices.AttrUUID), Index: idx,
			ProductName: stringAttr(d, resourceslices.AttrProductName), MemoryBytes: uint64(capacityOf(d)),
			ComputeModes: stringAttr(d, resourceslices.AttrComputeModes)})
		inv.Enforcement = domain.Enforcement(stringAttr(d, resourceslices.AttrMemoryEnforcement))
		inv.MPSVersion = stringAttr(d, resourceslices.AttrMPSVersion)
	}
	return inv
}

// suggest finds, with allocator replays, what would make the pending claims
// fit: the largest request that fits now, and the GPU that fits after the
// fewest pods leave.
func (w *world) suggest(ctx context.Context, nodes []string, pending []*resourceapi.ResourceClaim, diags []nodeDiag) ([]Suggestion, error) {
	var out []Suggestion
	for ci, c := range pending {
		for _, group := range alts(c) {
			for _, a := range group {
				if a.all || a.count != 1 || !memoryBound(a, diags) {
					continue
				}
				s, err := w.smaller(ctx, pending, ci, a, diags)
				if err != nil {
					return nil, err
				}
				if s != nil {
					out = append(out, *s)
				}
				l, err := w.afterLeaving(ctx, pending, a, diags)
				if err != nil {
					return nil, err
				}
				if l != nil {
					out = append(out, *l)
				}
			}
		}
	}
	return out, nil
}

// memoryBound: memory is what keeps a out of every node where its
// selectors and taints allow some GPU.
func memoryBound(a alt, diags []nodeDiag) bool {
	bound := false
	for _, nd := range diags {
		for _, d := range nd.diags {
			if d.a.claim != a.claim || d.a.request != a.request || d.reason == nil {
				continue
			}
			switch d.reason.Code {
			case NotEnoughMemory, Fragmented:
				bound = true
			}
		}
	}
	return bound
}

// smaller replays the claims with a's request lowered to the largest free
// share of an eligible GPU, trying the GPUs from the most free down until
// the allocator places it and the node's plugin would prepare it.
func (w *world) smaller(ctx context.Context, pending []*resourceapi.ResourceClaim, ci int, a alt, diags []nodeDiag) (*Suggestion, error) {
	type candidate struct {
		bytes        int64
		node, device string
	}
	var cands []candidate
	for _, nd := range diags {
		for _, d := range nd.diags {
			if d.a.claim != a.claim || d.a.request != a.request {
				continue
			}
			for _, e := range d.eligible {
				if v := floorOnPolicy(e.free, e.dev); v > 0 {
					cands = append(cands, candidate{v, nd.node, e.key.device})
				}
			}
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].bytes > cands[j].bytes })
	// Each try is one replay over every node; a handful covers the
	// distinct shapes a real cluster has.
	const maxTries = 8
	for i, c := range cands {
		if i == maxTries {
			break
		}
		claims := append([]*resourceapi.ResourceClaim(nil), pending...)
		claims[ci] = withRequest(a, c.bytes)
		fits, err := w.fitsOn(ctx, []string{c.node}, claims, nil)
		if err != nil {
			return nil, err
		}
		results, ok := fits[c.node]
		if !ok || len(w.refusals(c.node, claims, results)) > 0 {
			continue
		}
		return &Suggestion{Kind: "SmallerRequest", Claim: a.claimName(), Request: a.request, Node: c.node, Device: c.device, RequestBytes: c.bytes,
			Message: fmt.Sprintf("a request of at most %s (capacity.requests.memory of request %s) fits now on %s %s", q(c.bytes), a.request, c.node, c.device)}, nil
	}
	return nil, nil
}

// withRequest is a's claim with a's memory request set to bytes.
func withRequest(a alt, bytes int64) *resourceapi.ResourceClaim {
	c := a.claim.DeepCopy()
	set := func(capacity **resourceapi.CapacityRequirements) {
		if *capacity == nil {
			*capacity = &resourceapi.CapacityRequirements{}
		}
		if (*capacity).Requests == nil {
			(*capacity).Requests = map[resourceapi.QualifiedName]resourceQuantity{}
		}
		(*capacity).Requests[resourceslices.MemoryCapacity] = quantity(bytes)
	}
	for i := range c.Spec.Devices.Requests {
		r := &c.Spec.Devices.Requests[i]
		if r.Exactly != nil && r.Name == a.request {
			set(&r.Exactly.Capacity)
		}
		for j := range r.FirstAvailable {
			if r.Name+"/"+r.FirstAvailable[j].Name == a.request {
				set(&r.FirstAvailable[j].Capacity)
			}
		}
	}
	return c
}

// afterLeaving finds the GPU that fits a after the fewest claims leave it
// (then the least memory freed), and confirms it with a replay.
func (w *world) afterLeaving(ctx context.Context, pending []*resourceapi.ResourceClaim, a alt, diags []nodeDiag) (*Suggestion, error) {
	_, holders := w.used(nil)
	type option struct {
		node, device string
		leaving      []holder
		freed        int64
	}
	var options []option
	for _, nd := range diags {
		for _, d := range nd.diags {
			if d.a.claim != a.claim || d.a.request != a.request {
				continue
			}
			for _, e := range d.eligible {
				if e.need > capacityOf(e.dev) || e.free >= e.need {
					continue
				}
				hs := append([]holder(nil), holders[e.key]...)
				sort.SliceStable(hs, func(i, j int) bool { return hs[i].bytes > hs[j].bytes })
				o := option{node: nd.node, device: e.key.device}
				free := e.free
				for _, h := range hs {
					if free >= e.need {
						break
					}
					o.leaving = append(o.leaving, h)
					o.freed += h.bytes
					free += h.bytes
				}
				if free >= e.need {
					options = append(options, o)
				}
			}
		}
	}
	sort.SliceStable(options, func(i, j int) bool {
		if len(options[i].leaving) != len(options[j].leaving) {
			return len(options[i].leaving) < len(options[j].leaving)
		}
		return options[i].freed < options[j].freed
	})
	// Each try is one replay; the best few options decide in practice, and
	// a cap keeps why quick on large clusters.
	const maxTries = 16
	for i, o := range options {
		if i == maxTries {
			break
		}
		leaving := sets.New[types.UID]()
		var pods, claims []string
		for _, h := range o.leaving {
			leaving.Insert(h.claim.UID)
			claims = append(claims, h.claim.Namespace+"/"+h.claim.Name)
			pods = append(pods, podsOf(h.claim)...)
		}
		fits, err := w.fitsOn(ctx, []string{o.node}, pending, leaving)
		if err != nil {
			return nil, err
		}
		if _, ok := fits[o.node]; !ok {
			continue
		}
		who := strings.Join(pods, ", ")
		if who == "" {
			who = "the pods of " + strings.Join(claims, ", ")
		}
		verb := "leave"
		if len(pods) == 1 {
			verb = "leaves"
		}
		return &Suggestion{Kind: "AfterPodsLeave", Claim: a.claimName(), Request: a.request, Node: o.node, Device: o.device,
			Pods: pods, Leaving: claims,
			Message: fmt.Sprintf("%s on %s fits it once %s %s (%s freed)", o.device, o.node, who, verb, q(o.freed))}, nil
	}
	return nil, nil
}

// podsOf are the pods a claim is reserved for, namespace/name.
func podsOf(c *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" {
			out = append(out, c.Namespace+"/"+r.Name)
		}
	}
	return out
}

// migFromSlice rebuilds a MIG instance from its slice device: its name
// carries the parent's index and the instance ids, its attributes the
// rest planning reads.
func migFromSlice(d resourceapi.Device, name string) (domain.MIGDevice, bool) {
	var m domain.MIGDevice
	if n, err := fmt.Sscanf(name, "gpu-%d-mig-%d-%d", &m.Parent.Index, &m.GIID, &m.CIID); n != 3 || err != nil || m.Name() != name {
		return m, false
	}
	m.UUID = stringAttr(d, resourceslices.AttrUUID)
	m.Parent.UUID = stringAttr(d, resourceslices.AttrParentUUID)
	m.Parent.ProductName = stringAttr(d, resourceslices.AttrProductName)
	m.Profile = stringAttr(d, resourceslices.AttrMIGProfile)
	m.MemoryBytes = uint64(capacityOf(d))
	return m, true
}
