// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package packing compares how many GPUs a trace of pods needs under the
// strategies platform teams choose between: a whole GPU per pod, MIG
// partitions, time-slicing replicas, and gpufrac (the scheduler's allocator
// over gpufrac's consumable memory, via internal/cli/simulate). Each strategy reports
// the same figures so the benchmark prints them side by side.
package packing

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

// Outcome of one strategy on one trace.
type Outcome struct {
	Strategy   string
	PodsPlaced int
	GPUsUsed   int
	// Utilisation is the placed pods' requested memory over the memory of
	// the GPUs used.
	Utilisation float64
	// AtRisk counts pods on a GPU whose placed requests exceed its memory:
	// the pods that can run out of memory because of a neighbour.
	AtRisk int
}

// LowerBound is the fewest GPUs that could hold the trace's requests.
func LowerBound(asks []simulate.Ask, gpuBytes int64) int {
	var sum int64
	for _, a := range asks {
		sum += a.Request.Value()
	}
	return int(math.Ceil(float64(sum) / float64(gpuBytes)))
}

func utilisation(placed []simulate.Ask, gpusUsed int, gpuBytes int64) float64 {
	if gpusUsed == 0 {
		return 0
	}
	var sum int64
	for _, a := range placed {
		sum += a.Request.Value()
	}
	return float64(sum) / float64(int64(gpusUsed)*gpuBytes)
}

// WholeGPU gives every pod a GPU of its own, as a DRA driver without
// sharing does.
func WholeGPU(asks []simulate.Ask, totalGPUs int, gpuBytes int64) Outcome {
	n := min(len(asks), totalGPUs)
	return Outcome{Strategy: "whole GPU", PodsPlaced: n, GPUsUsed: n, Utilisation: utilisation(asks[:n], n, gpuBytes)}
}

// TimeSlicingReplicas advertises each GPU replicas times and places pods
// by count, first fit, blind to memory; pods on a GPU whose requests add
// up past its memory are at risk.
func TimeSlicingReplicas(asks []simulate.Ask, totalGPUs, replicas int, gpuBytes int64) Outcome {
	load := make([]int64, totalGPUs)
	count := make([]int, totalGPUs)
	var placed []simulate.Ask
	for _, a := range asks {
		for g := range totalGPUs {
			if count[g] < replicas {
				count[g]++
				load[g] += a.Request.Value()
				placed = append(placed, a)
				break
			}
		}
	}
	out := Outcome{Strategy: fmt.Sprintf("time-slicing x%d", replicas), PodsPlaced: len(placed)}
	for g := range totalGPUs {
		if count[g] > 0 {
			out.GPUsUsed++
		}
		if load[g] > gpuBytes {
			out.AtRisk += count[g]
		}
	}
	out.Utilisation = utilisation(placed, out.GPUsUsed, gpuBytes)
	return out
}

// migProfile is one GPU instance profile of the H200.
type migProfile struct {
	name      string
	memBytes  int64
	slices    uint32 // compute slices
	memSlices int    // of the GPU's 8 memory slices
	maxPerGPU uint32
}

// h200Profiles are the H200's MIG profiles, with memory sizes, compute
// slices and instance counts from go-nvml's H200 tables; the
// media-extension variant is left out, as inference pods do not ask for it.
func h200Profiles() []migProfile {
	cfg := gpus.H200_SXM5_141GB.MIGProfiles
	full := float64(gpus.H200_SXM5_141GB.MemoryMB)
	var out []migProfile
	for id, info := range cfg.GpuInstanceProfiles {
		if id == nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1 {
			continue
		}
		out = append(out, migProfile{
			name:      fmt.Sprintf("%dg.%dgb", info.SliceCount, info.MemorySizeMB/1024),
			memBytes:  int64(info.MemorySizeMB) << 20,
			slices:    info.SliceCount,
			memSlices: int(math.Round(float64(info.MemorySizeMB) / (full / 8))),
			maxPerGPU: info.InstanceCount,
		})
	}
	// Smallest memory first, then fewest compute slices: the cheapest
	// profile that holds a pod.
	sort.Slice(out, func(i, j int) bool {
		if out[i].memBytes != out[j].memBytes {
			return out[i].memBytes < out[j].memBytes
		}
		return out[i].slices < out[j].slices
	})
	return out
}

// migGPU is one GPU's MIG layout under the rules of A100/H100-class MIG:
// eight memory slices, an instance takes a window of them aligned to its
// size; seven compute slices in all; and per-profile instance counts.
type migGPU struct {
	memUsed     [8]bool
	computeUsed uint32
	perName     map[string]uint32
}

func (g *migGPU) place(p migProfile) bool {
	if g.perName[p.name] >= p.maxPerGPU || g.computeUsed+p.slices > 7 {
		return false
	}
	for start := 0; start+p.memSlices <= 8; start += p.memSlices {
		free := true
		for s := start; s < start+p.memSlices; s++ {
			free = free && !g.memUsed[s]
		}
		if free {
			for s := start; s < start+p.memSlices; s++ {
				g.memUsed[s] = true
			}
			g.computeUsed += p.slices
			g.perName[p.name]++
			return true
		}
	}
	return false
}

// MIG gives each pod the smallest H200 profile that holds its request and
// places it first fit under the MIG placement rules. The pod's guaranteed
// memory is its request; the rest of the instance is stranded.
func MIG(asks []simulate.Ask, totalGPUs int, gpuBytes int64) Outcome {
	profiles := h200Profiles()
	layout := make([]migGPU, totalGPUs)
	for i := range layout {
		layout[i].perName = map[string]uint32{}
	}
	var placed []simulate.Ask
	for _, a := range asks {
		var prof *migProfile
		for i := range profiles {
			if profiles[i].memBytes >= a.Request.Value() {
				prof = &profiles[i]
				break
			}
		}
		if prof == nil {
			continue
		}
		for g := range layout {
			if layout[g].place(*prof) {
				placed = append(placed, a)
				break
			}
		}
	}
	out := Outcome{Strategy: "MIG (H200 profiles)", PodsPlaced: len(placed)}
	for _, g := range layout {
		if g.computeUsed > 0 {
			out.GPUsUsed++
		}
	}
	out.Utilisation = utilisation(placed, out.GPUsUsed, gpuBytes)
	return out
}

// Gpufrac places the trace with the scheduler's allocator over gpufrac's
// ResourceSlices, first fit; no GPU's guaranteed requests can exceed its
// memory.
func Gpufrac(ctx context.Context, asks []simulate.Ask, slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass, gpuBytes int64) (Outcome, error) {
	return GpufracWith(ctx, asks, slices, classes, gpuBytes, simulate.Scheduler{FirstFit: true}, "gpufrac (first fit)")
}

// GpufracWith is Gpufrac with nodes chosen as sched chooses them (the
// real kube-scheduler's model, with or without gpufrac's packing).
func GpufracWith(ctx context.Context, asks []simulate.Ask, slices []*resourceapi.ResourceSlice, classes []*resourceapi.DeviceClass, gpuBytes int64, sched simulate.Scheduler, name string) (Outcome, error) {
	res, err := simulate.RunWith(ctx, slices, classes, simulate.Pods(asks), sched)
	if err != nil {
		return Outcome{}, err
	}
	s := res.Summarize()
	out := Outcome{Strategy: name, PodsPlaced: s.PodsPlaced, GPUsUsed: s.GPUsUsed}
	placed := map[string]bool{}
	for _, p := range res.Placed {
		placed[p.Pod] = true
	}
	var ok []simulate.Ask
	for i, a := range asks {
		if placed[fmt.Sprintf("inference-%04d", i)] {
			ok = append(ok, a)
		}
	}
	for _, g := range res.GPUs {
		if g.Guaranteed > g.Capacity {
			out.AtRisk += len(g.Claims)
		}
	}
	out.Utilisation = utilisation(ok, out.GPUsUsed, gpuBytes)
	return out, nil
}

// Measured is a placement measured elsewhere (hack/bench/realsched: the
// real kube-scheduler) on the whole trace asks: every pod placed, on
// gpusUsed GPUs. Nobody is at risk: gpufrac allocates memory as capacity,
// so no GPU holds more requests than its memory.
func Measured(name string, asks []simulate.Ask, placed, gpusUsed int, gpuBytes int64) (Outcome, error) {
	if placed != len(asks) {
		return Outcome{}, fmt.Errorf("%s: %d of %d pods placed: only a whole trace compares", name, placed, len(asks))
	}
	return Outcome{Strategy: name, PodsPlaced: placed, GPUsUsed: gpusUsed, Utilisation: utilisation(asks, gpusUsed, gpuBytes)}, nil
}
