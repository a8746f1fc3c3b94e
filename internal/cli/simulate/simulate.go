// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package simulate places a workload on a simulated cluster the way the
// scheduler would: the ResourceSlices come from the same code the kubelet
// plugin runs over go-nvml's mock GPUs, and placement is the scheduler's own
// structured allocator (internal/core/allocator), pod by pod, node by node. It is the
// engine of `kubectl gpufrac simulate` and of the packing benchmark.
package simulate

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/core/allocator"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Cluster is the shape to simulate.
type Cluster struct {
	Nodes int
	// GPUs per node, as --simulate-gpus takes it ("h200x8").
	GPUs        string
	Enforcement domain.Enforcement
}

// Pod is one workload entry: a pod (Replicas copies) and the claim specs
// its resourceClaims ask for.
type Pod struct {
	Name     string
	Replicas int
	Claims   []resourceapi.ResourceClaimSpec
}

// Share is one allocated device share.
type Share struct {
	Node   string `json:"node"`
	Device string `json:"device"`
	Memory int64  `json:"memoryBytes"`
}

// Placed is a pod that fits.
type Placed struct {
	Pod    string  `json:"pod"`
	Node   string  `json:"node"`
	Shares []Share `json:"shares"`
}

// NotPlaced is a pod that does not, and why.
type NotPlaced struct {
	Pod    string `json:"pod"`
	Reason string `json:"reason"`
}

// GPU is one GPU's state after placement.
type GPU struct {
	Node       string   `json:"node"`
	Device     string   `json:"device"`
	Capacity   int64    `json:"capacityBytes"`
	Guaranteed int64    `json:"guaranteedBytes"`
	Claims     []string `json:"claims"`
}

// Result of a simulation.
type Result struct {
	Placed    []Placed    `json:"placed"`
	NotPlaced []NotPlaced `json:"notPlaced"`
	// GPUs lists the GPUs with at least one claim.
	GPUs []GPU `json:"gpus"`
	// TotalGPUs is how many the cluster has.
	TotalGPUs int `json:"totalGPUs"`
}

// Slices builds the cluster's ResourceSlices with the plugin's own code.
func (c Cluster) Slices(ctx context.Context) ([]*resourceapi.ResourceSlice, error) {
	var out []*resourceapi.ResourceSlice
	for i := range c.Nodes {
		s, err := NodeSlices(ctx, NodeName(i), c.GPUs, c.Enforcement)
		if err != nil {
			return nil, err
		}
		out = append(out, s...)
	}
	return out, nil
}

// NodeName is the name of the cluster's i-th node.
func NodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

// NodeSlices are the ResourceSlices gpufrac-kubelet-plugin
// --simulate-gpus=gpus publishes on node name, made by the plugin's own
// slice code over the inventory its discovery finds on such a node
// (catalog.Inventory: the catalog, no NVML, so the CLI needs no
// cgo; gpusim's tests hold it equal to discovery over go-nvml's mocks).
// Empty enforcement means dmem.
func NodeSlices(ctx context.Context, name, gpus string, enf domain.Enforcement) ([]*resourceapi.ResourceSlice, error) {
	if enf == "" {
		enf = domain.EnforcementDMem
	}
	inv, err := catalog.Inventory(gpus, name, enf)
	if err != nil {
		return nil, err
	}
	res, err := resourceslices.DriverResources(name, inv)
	if err != nil {
		return nil, err
	}
	return resourceslices.Objects("gpufrac.dev", res), nil
}

// MemorySizes are the distinct GPU memory capacities of the slices, for
// translating KAI portions.
func MemorySizes(slices []*resourceapi.ResourceSlice) []resource.Quantity {
	var sizes []resource.Quantity
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if !resourceslices.IsFractionTarget(&d) {
				continue
			}
			q := d.Capacity[resourceslices.MemoryCapacity].Value
			found := false
			for _, have := range sizes {
				found = found || have.Cmp(q) == 0
			}
			if !found {
				sizes = append(sizes, q)
			}
		}
	}
	return sizes
}

// Run places pods in order on the cluster, first fit: each pod on the
// first node where it fits. RunWith models kube-scheduler's choice.
func Run(ctx context.Context, slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass, pods []Pod) (*Result, error) {
	return RunWith(ctx, slices, classes, pods, Scheduler{FirstFit: true})
}

// RunWith places pods in order on the cluster, choosing nodes as sched does.
func RunWith(ctx context.Context, slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass, pods []Pod, sched Scheduler) (*Result, error) {
	cl := allocator.New(slices, classes)
	st, err := newSchedState(sched, cl.NodeNames())
	if err != nil {
		return nil, err
	}
	res := &Result{}
	gpus := map[string]*GPU{}
	var largest int64
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			if !resourceslices.IsFractionTarget(&d) {
				continue
			}
			capacity := d.Capacity[resourceslices.MemoryCapacity].Value
			gpus[*s.Spec.NodeName+"/"+d.Name] = &GPU{Node: *s.Spec.NodeName, Device: d.Name, Capacity: capacity.Value()}
			largest = max(largest, capacity.Value())
			res.TotalGPUs++
		}
	}
	for _, p := range pods {
		for r := range max(p.Replicas, 1) {
			name := p.Name
			if p.Replicas > 1 {
				name += "-" + strconv.Itoa(r)
			}
			claims := make([]*resourceapi.ResourceClaim, len(p.Claims))
			for i, spec := range p.Claims {
				claims[i] = &resourceapi.ResourceClaim{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, i), Namespace: "sim", UID: types.UID(fmt.Sprintf("%s-%d", name, i))},
					Spec:       *spec.DeepCopy(),
				}
			}
			fit, err := st.place(ctx, cl, isFraction(p.Claims), claims)
			if err != nil {
				return nil, fmt.Errorf("placing %s: %w", name, err)
			}
			if fit == nil {
				res.NotPlaced = append(res.NotPlaced, NotPlaced{Pod: name, Reason: notPlacedReason(p, largest)})
				continue
			}
			placed := Placed{Pod: name, Node: fit.Node}
			for i, a := range fit.Results {
				for _, d := range a.Devices.Results {
					mem := d.ConsumedCapacity[resourceslices.MemoryCapacity]
					placed.Shares = append(placed.Shares, Share{Node: d.Pool, Device: d.Device, Memory: mem.Value()})
					g := gpus[d.Pool+"/"+d.Device]
					g.Guaranteed += mem.Value()
					g.Claims = append(g.Claims, claims[i].Name)
				}
			}
			res.Placed = append(res.Placed, placed)
		}
	}
	for _, g := range gpus {
		if len(g.Claims) > 0 {
			res.GPUs = append(res.GPUs, *g)
		}
	}
	sort.Slice(res.GPUs, func(i, j int) bool {
		if res.GPUs[i].Node != res.GPUs[j].Node {
			return res.GPUs[i].Node < res.GPUs[j].Node
		}
		return deviceIndex(res.GPUs[i].Device) < deviceIndex(res.GPUs[j].Device)
	})
	return res, nil
}

func deviceIndex(name string) int {
	n, _ := strconv.Atoi(name[len("gpu-"):])
	return n
}

// notPlacedReason tells a pod that can never fit from one that found the
// cluster full.
func notPlacedReason(p Pod, largest int64) string {
	for _, spec := range p.Claims {
		for _, r := range spec.Devices.Requests {
			if r.Exactly == nil || r.Exactly.Capacity == nil {
				continue
			}
			if q, ok := r.Exactly.Capacity.Requests[resourceslices.MemoryCapacity]; ok && q.Value() > largest {
				return fmt.Sprintf("request %s asks for %s, more than any GPU has (%s)", r.Name, q.String(),
					resource.NewQuantity(largest, resource.BinarySI).String())
			}
		}
	}
	return "no node has room for all its claims: the guaranteed memory of the GPUs that match is taken"
}

// Summary are the figures the benchmark compares.
type Summary struct {
	PodsPlaced, PodsNotPlaced, GPUsUsed int
	// MemoryUtilisation is guaranteed memory over the capacity of the
	// GPUs used.
	MemoryUtilisation float64
}

// Summarize reduces a result.
func (r *Result) Summarize() Summary {
	var guaranteed, capacity int64
	for _, g := range r.GPUs {
		guaranteed += g.Guaranteed
		capacity += g.Capacity
	}
	s := Summary{PodsPlaced: len(r.Placed), PodsNotPlaced: len(r.NotPlaced), GPUsUsed: len(r.GPUs)}
	if capacity > 0 {
		s.MemoryUtilisation = float64(guaranteed) / float64(capacity)
	}
	return s
}
