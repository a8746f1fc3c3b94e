// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

// The bounds every quantity a user gives gpufrac is checked against before
// any arithmetic, beside the bounds on a quantity's text (quantity.go): the
// most memory one share may ask for and the most devices one request may
// ask for, each with where it comes from, so an error can say so.

import (
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxDevices is the most devices one fractional request may ask for, and
// where that bound comes from: the most gpufrac GPUs one node publishes
// when the cluster is known (maxPerNode > 0; a claim is allocated on one
// node), never more than the API's limit on the devices one claim's
// allocation can hold (resource.k8s.io/v1 AllocationResultsMaxSize, 32,
// documented in k8s.io/api). Above it a pod would stay Pending forever.
func MaxDevices(maxPerNode int) (int, string) {
	if maxPerNode > 0 && maxPerNode < resourceapi.AllocationResultsMaxSize {
		return maxPerNode, "the most gpufrac GPUs one node in the cluster publishes"
	}
	return resourceapi.AllocationResultsMaxSize, "the most devices one claim's allocation holds (resource.k8s.io/v1 AllocationResultsMaxSize)"
}

// LargestGPU is the most memory one share may ask for, and where that
// bound comes from: the largest of sizes (the GPUs the cluster publishes),
// or, when none is known, the largest GPU in the simulated catalog
// (CatalogLargestGPU: the largest GPU gpufrac has figures for).
func LargestGPU(sizes []resource.Quantity) (resource.Quantity, string) {
	if len(sizes) > 0 {
		return slices.MaxFunc(sizes, func(a, b resource.Quantity) int { return a.Cmp(b) }).DeepCopy(), "the cluster publishes"
	}
	q, name := CatalogLargestGPU()
	return q, fmt.Sprintf("gpufrac knows (%s in its simulated catalog; no GPU sizes of a cluster were given)", name)
}

// The largest GPU of the simulated catalog (internal/sim/catalog, whose
// test holds the two equal): the largest GPU gpufrac has figures for. A
// constant here rather than an import, so that the API package depends on
// no simulation code.
const (
	catalogLargestModel = "b200"
	catalogLargestBytes = 184320 << 20
)

// CatalogLargestGPU is the largest GPU of the simulated catalog and its
// model name.
func CatalogLargestGPU() (resource.Quantity, string) {
	return *resource.NewQuantity(catalogLargestBytes, resource.BinarySI), catalogLargestModel
}
