// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package allocator

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/structured"
)

// Fit is a node where a pod's claims fit, with what they would get there.
type Fit struct {
	Node    string
	Results []resourceapi.AllocationResult
}

// NodeNames are the cluster's nodes in order.
func (c *Cluster) NodeNames() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Name
	}
	return out
}

// FitsFrom is kube-scheduler's Filter pass for one pod: it tries nodes in
// order from index start, wrapping around, and stops once want nodes fit
// (want <= 0 tries them all), as the scheduler stops at its
// percentageOfNodesToScore. skip, when not nil, rejects a node before the
// allocator runs (another plugin's Filter). It records nothing: Record the
// chosen fit's results. It returns how many nodes it tried, for the
// scheduler's next start index.
func (c *Cluster) FitsFrom(ctx context.Context, start, want int, skip func(node string) bool, claims ...*resourceapi.ResourceClaim) ([]Fit, int, error) {
	alloc, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true, PrioritizedList: true},
		c.state(), c.classes, c.slices, c.cache)
	if err != nil {
		return nil, 0, fmt.Errorf("creating the allocator: %w", err)
	}
	n := len(c.nodes)
	var fits []Fit
	tried := 0
	for ; tried < n && (want <= 0 || len(fits) < want); tried++ {
		node := c.nodes[(start+tried)%n]
		if skip != nil && skip(node.Name) {
			continue
		}
		results, err := alloc.Allocate(ctx, node, claims)
		if err != nil {
			return nil, 0, fmt.Errorf("allocating on node %s: %w", node.Name, err)
		}
		if results != nil {
			fits = append(fits, Fit{Node: node.Name, Results: results})
		}
	}
	return fits, tried, nil
}
