// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

// The --sm-sharing-gpus setting, parsed here beside its only user: it is
// the node's flag, and what it yields (GPU.ComputeModes, published as the
// computeModes attribute) is the part other programs read, in pkg/domain.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// assignComputeModes applies a --sm-sharing-gpus setting: "" leaves every
// GPU open to both modes; "all", "none" or a comma list of GPU indices
// reserve the listed GPUs for SMSharing and the others for TimeSlicing.
func assignComputeModes(inv *domain.Inventory, setting string) error {
	listed, err := parseSMSharingGPUs(setting)
	if err != nil {
		return err
	}
	for _, idx := range listed {
		found := false
		for _, g := range inv.GPUs {
			found = found || g.Index == idx
		}
		if !found {
			return fmt.Errorf("--sm-sharing-gpus %q: this node has no GPU %d", setting, idx)
		}
	}
	for i := range inv.GPUs {
		inv.GPUs[i].ComputeModes = modesOf(setting, listed, inv.GPUs[i].Index)
	}
	return nil
}

// computeModesAt is what a --sm-sharing-gpus setting gives the GPU with
// index: for a GPU that starts serving fractions while the plugin runs
// (its MIG mode was turned off), which assignComputeModes did not see.
func computeModesAt(setting string, index int) (string, error) {
	listed, err := parseSMSharingGPUs(setting)
	if err != nil {
		return "", err
	}
	return modesOf(setting, listed, index), nil
}

// parseSMSharingGPUs returns the indices a comma-list setting names (none
// for "", "all" and "none").
func parseSMSharingGPUs(setting string) ([]int, error) {
	switch setting = strings.TrimSpace(setting); setting {
	case "", "all", "none":
		return nil, nil
	}
	var listed []int
	for _, f := range strings.Split(setting, ",") {
		idx, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--sm-sharing-gpus %q: %q is not a GPU index (want all, none or a list such as 0,1)", setting, f)
		}
		listed = append(listed, idx)
	}
	return listed, nil
}

// modesOf is the compute modes of the GPU with index under setting, whose
// listed indices parseSMSharingGPUs returned.
func modesOf(setting string, listed []int, index int) string {
	switch strings.TrimSpace(setting) {
	case "":
		return domain.ComputeModesAny
	case "all":
		return domain.ComputeModesSMSharing
	}
	if slices.Contains(listed, index) {
		return domain.ComputeModesSMSharing
	}
	return domain.ComputeModesTimeSlicing
}
