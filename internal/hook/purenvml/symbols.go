// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package purenvml

// The per-cgroup limit entry points, present from driver r615 (CUDA 13.4)
// on; nvml.h declares no other version of either.
const (
	setMemoryLimitsSymbol = "nvmlDeviceSetMemoryLimits_v1"
	getMemoryLimitsSymbol = "nvmlDeviceGetMemoryLimits_v1"
)
