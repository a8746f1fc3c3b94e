// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/utils/ptr"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/allocator"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
)

// features are the allocator features kube-scheduler v1.37 runs with for
// gpufrac's claims: consumable capacity (beta, on), prioritized lists
// (firstAvailable, which KAI translation uses) and device taints (the
// plugin taints unhealthy GPUs).
var features = structured.Features{ConsumableCapacity: true, PrioritizedList: true, DeviceTaints: true}

// world is a snapshot prepared for replays.
type world struct {
	snap    Snapshot
	classes allocator.ClassLister
	cache   *cel.Cache
	// allocated are the allocated claims other than the target's.
	allocated []*resourceapi.ResourceClaim
	devices   map[deviceKey]deviceInfo
	// byNode are each node's gpufrac devices, in device order.
	byNode map[string][]deviceKey
	// poolNodes are the nodes that publish pools, in name order.
	poolNodes []string
	nodes     map[string]*v1.Node
}

type deviceKey struct{ pool, device string }

type deviceInfo struct {
	node   string
	driver string
	dev    resourceapi.Device
}

func newWorld(snap Snapshot, target []*resourceapi.ResourceClaim) *world {
	w := &world{snap: snap, classes: allocator.ClassLister{}, cache: cel.NewCache(100, cel.Features{EnableConsumableCapacity: true}),
		devices: map[deviceKey]deviceInfo{}, nodes: map[string]*v1.Node{}}
	for _, c := range snap.Classes {
		w.classes[c.Name] = c
	}
	own := sets.New[types.UID]()
	for _, c := range target {
		own.Insert(c.UID)
	}
	for _, c := range snap.Claims {
		if c.Status.Allocation != nil && !own.Has(c.UID) {
			w.allocated = append(w.allocated, c)
		}
	}
	seen := sets.New[string]()
	for _, s := range snap.Slices {
		if s.Spec.NodeName == nil {
			continue
		}
		node := *s.Spec.NodeName
		seen.Insert(node)
		for _, d := range s.Spec.Devices {
			w.devices[deviceKey{s.Spec.Pool.Name, d.Name}] = deviceInfo{node: node, driver: s.Spec.Driver, dev: d}
		}
	}
	w.poolNodes = sets.List(seen)
	w.byNode = map[string][]deviceKey{}
	for k, info := range w.devices {
		if info.driver == v1alpha1.DriverName {
			w.byNode[info.node] = append(w.byNode[info.node], k)
		}
	}
	for _, keys := range w.byNode {
		sort.Slice(keys, func(i, j int) bool { return deviceLess(keys[i].device, keys[j].device) })
	}
	for _, n := range snap.Nodes {
		w.nodes[n.Name] = n
	}
	return w
}

// node is the Node object the allocator matches slices against: the real
// one when visible, else one that has only the name (gpufrac's slices name
// their node, so the name is all the allocator needs).
func (w *world) node(name string) *v1.Node {
	if n, ok := w.nodes[name]; ok {
		return n
	}
	return &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// candidates are the nodes a pod may go to, with the reason for each node
// that is ruled out before its GPUs matter.
func (w *world) candidates(pod *v1.Pod) ([]string, []NodeResult) {
	if pod == nil {
		return w.poolNodes, nil
	}
	var ok []string
	var out []NodeResult
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	for _, name := range w.poolNodes {
		if pod.Spec.NodeName != "" && pod.Spec.NodeName != name {
			continue // bound elsewhere: not worth a line per node
		}
		n, visible := w.nodes[name]
		if visible {
			if match, err := required.Match(n); err == nil && !match {
				out = append(out, NodeResult{Node: name, Reasons: []Reason{{Code: NodeExcluded,
					Message: "the pod's node selector or required node affinity does not match this node"}}})
				continue
			}
		}
		ok = append(ok, name)
	}
	return ok, out
}

// state is what the allocated claims hold, less the claims in leaving, as
// the scheduler tracks it.
func (w *world) state(leaving sets.Set[types.UID]) structured.AllocatedState {
	held := make([]resourceapi.AllocationResult, 0, len(w.allocated))
	for _, c := range w.allocated {
		if !leaving.Has(c.UID) {
			held = append(held, *c.Status.Allocation)
		}
	}
	return allocator.AllocatedState(held...)
}

// newAllocator is the scheduler's allocator over the snapshot without the
// claims in leaving.
func (w *world) newAllocator(ctx context.Context, leaving sets.Set[types.UID]) (structured.Allocator, error) {
	alloc, err := structured.NewAllocator(ctx, features, w.state(leaving), w.classes, w.snap.Slices, w.cache)
	if err != nil {
		return nil, fmt.Errorf("creating the allocator: %w", err)
	}
	return alloc, nil
}

// fitsOn replays one allocation attempt per node and returns the nodes
// where claims fit, with their allocations.
func (w *world) fitsOn(ctx context.Context, nodes []string, claims []*resourceapi.ResourceClaim, leaving sets.Set[types.UID]) (map[string][]resourceapi.AllocationResult, error) {
	alloc, err := w.newAllocator(ctx, leaving)
	if err != nil {
		return nil, err
	}
	out := map[string][]resourceapi.AllocationResult{}
	for _, n := range nodes {
		results, err := alloc.Allocate(ctx, w.node(n), claims)
		if err != nil {
			// A fatal allocator error (a CEL selector that fails to
			// evaluate) is what the scheduler reports too.
			return nil, fmt.Errorf("the scheduler's allocator fails on node %s: %w", n, err)
		}
		if results != nil {
			out[n] = results
		}
	}
	return out, nil
}

// used is the memory each gpufrac device has consumed, and by which claims,
// less the claims in leaving.
func (w *world) used(leaving sets.Set[types.UID]) (map[deviceKey]int64, map[deviceKey][]holder) {
	bytes := map[deviceKey]int64{}
	holders := map[deviceKey][]holder{}
	for _, c := range w.allocated {
		if leaving.Has(c.UID) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue // as the scheduler: a monitor holds nothing
			}
			k := deviceKey{r.Pool, r.Device}
			info, ok := w.devices[k]
			if !ok || r.Driver != info.driver {
				continue
			}
			n := capacityOf(info.dev)
			if r.ShareID != nil {
				q := r.ConsumedCapacity[resourceslices.MemoryCapacity]
				n = q.Value()
			}
			bytes[k] += n
			holders[k] = append(holders[k], holder{claim: c, bytes: n})
		}
	}
	return bytes, holders
}

// holder is a claim's consumption of one device.
type holder struct {
	claim *resourceapi.ResourceClaim
	bytes int64
}

func capacityOf(d resourceapi.Device) int64 {
	c := d.Capacity[resourceslices.MemoryCapacity].Value
	return c.Value()
}

// nodeDevices are the gpufrac devices of a node, in device order.
func (w *world) nodeDevices(node string) []deviceKey { return w.byNode[node] }
