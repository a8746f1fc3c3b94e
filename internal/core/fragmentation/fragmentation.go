// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package fragmentation reports how far a cluster's fractions are from
// packed: per GPU pool (every gpu-type device of one model), the lower
// bound of the GPUs the current shares need (their guaranteed memory over
// the GPU's memory, rounded up) against the GPUs they occupy, and the GPUs
// that would free up if their shares moved, found greedily. It is a
// report, never an eviction. Pure functions of slices and claims, shared
// by the controller's metric and `kubectl gpufrac status`.
package fragmentation

import (
	"cmp"
	"slices"
)

// MaxListed bounds the freeable GPUs a pool lists (all are counted).
const MaxListed = 10

// GPU is one fraction-target device with the shares it holds.
type GPU struct {
	// Pool groups interchangeable GPUs: the model (productName).
	Pool   string
	Node   string
	Device string
	// Capacity is the published memory; Guaranteed the sum of its shares.
	Capacity   int64
	Guaranteed int64
	// Shares are the guaranteed bytes of each share.
	Shares []int64
	// Tainted GPUs (NoSchedule, NoExecute) take no moved share.
	Tainted bool
}

// Free is what the GPU can still guarantee.
func (g GPU) Free() int64 { return g.Capacity - g.Guaranteed }

// Freeable is a GPU whose shares all fit elsewhere in its pool.
type Freeable struct {
	Node       string `json:"node"`
	Device     string `json:"device"`
	Guaranteed int64  `json:"guaranteedBytes"`
	Shares     int    `json:"shares"`
}

// Pool is the report for one pool.
type Pool struct {
	Name string `json:"pool"`
	// GPUMemory is the largest capacity in the pool, so LowerBound stays
	// a lower bound where a node keeps memory back (the MPS reserve).
	GPUMemory  int64 `json:"gpuMemoryBytes"`
	GPUs       int   `json:"gpus"`
	InUse      int   `json:"gpusInUse"`
	Guaranteed int64 `json:"guaranteedBytes"`
	// LowerBound is ceil(Guaranteed / GPUMemory): no placement of the
	// shares uses fewer GPUs.
	LowerBound int `json:"lowerBound"`
	// FreeBytes is the free memory of the GPUs in use; LargestFree the
	// most one of them (or an empty GPU) has.
	FreeBytes   int64 `json:"freeBytesOnUsedGPUs"`
	LargestFree int64 `json:"largestFreeBytes"`
	// Freeable counts the GPUs that would free up; FreeableGPUs lists
	// at most MaxListed of them, in the order found.
	Freeable     int        `json:"freeable"`
	FreeableGPUs []Freeable `json:"freeableGPUs,omitempty"`
}

// Analyze reports every pool of gpus, by name.
func Analyze(gpus []GPU) []Pool {
	byPool := map[string][]GPU{}
	for _, g := range gpus {
		byPool[g.Pool] = append(byPool[g.Pool], g)
	}
	out := make([]Pool, 0, len(byPool))
	for name, members := range byPool {
		out = append(out, analyzePool(name, members))
	}
	slices.SortFunc(out, func(a, b Pool) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

func analyzePool(name string, gpus []GPU) Pool {
	p := Pool{Name: name, GPUs: len(gpus)}
	for _, g := range gpus {
		p.GPUMemory = max(p.GPUMemory, g.Capacity)
		if !g.Tainted {
			p.LargestFree = max(p.LargestFree, g.Free())
		}
		if len(g.Shares) == 0 {
			continue
		}
		p.InUse++
		p.Guaranteed += g.Guaranteed
		p.FreeBytes += max(g.Free(), 0)
	}
	if p.GPUMemory > 0 {
		p.LowerBound = int((p.Guaranteed + p.GPUMemory - 1) / p.GPUMemory)
	}
	p.Freeable, p.FreeableGPUs = freeable(gpus)
	return p
}

// freeable finds, greedily, the GPUs whose shares all fit into the free
// memory of the pool's other GPUs in use: candidates smallest guarantee
// first; each candidate's shares, largest first, go to the GPU in use with
// the least free memory that takes them (best fit). A GPU that frees takes
// no shares afterwards, and one that took shares is no candidate any more
// (its shares moved there once already). Destinations are kept sorted by
// free memory, so a pool of n GPUs in use costs O(n log n) plus a
// binary search and an O(n) move per share.
func freeable(gpus []GPU) (int, []Freeable) {
	var used []*slot
	for _, g := range gpus {
		if len(g.Shares) > 0 {
			used = append(used, &slot{gpu: g, free: g.Free()})
		}
	}
	order := slices.Clone(used)
	slices.SortStableFunc(order, func(a, b *slot) int {
		if c := cmp.Compare(a.gpu.Guaranteed, b.gpu.Guaranteed); c != 0 {
			return c
		}
		return a.compareName(b)
	})
	var dst destinations
	for _, u := range used {
		if !u.gpu.Tainted {
			dst.insert(u)
		}
	}
	count := 0
	var listed []Freeable
	for _, cand := range order {
		if cand.took {
			continue
		}
		if !cand.gpu.Tainted {
			dst.remove(cand)
		}
		if moved, ok := dst.place(cand.gpu.Shares); ok {
			for _, m := range moved {
				m.took = true
			}
			count++
			if len(listed) < MaxListed {
				listed = append(listed, Freeable{Node: cand.gpu.Node, Device: cand.gpu.Device, Guaranteed: cand.gpu.Guaranteed, Shares: len(cand.gpu.Shares)})
			}
			continue
		}
		if !cand.gpu.Tainted {
			dst.insert(cand)
		}
	}
	return count, listed
}

// slot is a GPU in use during the greedy pass.
type slot struct {
	gpu  GPU
	free int64
	took bool
}

func (a *slot) compareName(b *slot) int {
	if c := cmp.Compare(a.gpu.Node, b.gpu.Node); c != 0 {
		return c
	}
	return cmp.Compare(a.gpu.Device, b.gpu.Device)
}

func (a *slot) compare(b *slot) int {
	if c := cmp.Compare(a.free, b.free); c != 0 {
		return c
	}
	return a.compareName(b)
}

// destinations are the GPUs that may take shares, by free memory.
type destinations struct{ s []*slot }

func (d *destinations) insert(x *slot) {
	i, _ := slices.BinarySearchFunc(d.s, x, (*slot).compare)
	d.s = slices.Insert(d.s, i, x)
}

func (d *destinations) remove(x *slot) {
	if i, found := slices.BinarySearchFunc(d.s, x, (*slot).compare); found {
		d.s = slices.Delete(d.s, i, i+1)
	}
}

// place puts shares, largest first, each on the fullest destination that
// takes it; all or nothing: on failure every move is undone.
func (d *destinations) place(shares []int64) ([]*slot, bool) {
	sorted := slices.Clone(shares)
	slices.SortFunc(sorted, func(a, b int64) int { return cmp.Compare(b, a) })
	type move struct {
		to    *slot
		bytes int64
	}
	var moves []move
	undo := func() {
		for _, m := range slices.Backward(moves) {
			d.remove(m.to)
			m.to.free += m.bytes
			d.insert(m.to)
		}
	}
	for _, b := range sorted {
		i, _ := slices.BinarySearchFunc(d.s, b, func(s *slot, want int64) int { return cmp.Compare(s.free, want) })
		if i == len(d.s) {
			undo()
			return nil, false
		}
		to := d.s[i]
		d.s = slices.Delete(d.s, i, i+1)
		to.free -= b
		d.insert(to)
		moves = append(moves, move{to, b})
	}
	out := make([]*slot, len(moves))
	for i, m := range moves {
		out[i] = m.to
	}
	return out, true
}
