// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const (
	// DriverName is the DRA driver name; opaque configs for other drivers are
	// not ours to read.
	DriverName = "gpufrac.dev"
	// GroupName is the API group of FractionConfig.
	GroupName = "gpufrac.dev"
	// Version is the API version of FractionConfig in that group.
	Version = "v1alpha1"
	// Kind is the only kind this API has.
	Kind = "FractionConfig"
)

// APIVersion is the apiVersion string a FractionConfig must carry.
const APIVersion = GroupName + "/" + Version

// ComputeMode says how containers sharing one GPU share its SMs.
type ComputeMode string

const (
	// TimeSlicing gives each container its own CUDA context and error
	// domain; the GPU time-slices among them. The default.
	TimeSlicing ComputeMode = "TimeSlicing"
	// SMSharing joins the GPU's managed MPS server: all SMs in parallel,
	// one error domain shared by every SMSharing client of that GPU.
	SMSharing ComputeMode = "SMSharing"
)

// FractionConfig is the opaque parameter object of driver gpufrac.dev.
//
// Every field is optional so that configs can be layered: the DeviceClass's
// config first, the claim's after, and a field set by a later config wins
// (see Merge). Defaults are applied after merging.
type FractionConfig struct {
	metav1.TypeMeta `json:",inline"`

	// MemoryLimit is the hard ceiling of GPU memory for each allocated share:
	// allocations past it fail. Defaults to the share's guaranteed memory
	// request (the `memory` capacity the scheduler consumed).
	MemoryLimit *resource.Quantity `json:"memoryLimit,omitempty"`

	// ComputeMode is TimeSlicing (default) or SMSharing.
	ComputeMode ComputeMode `json:"computeMode,omitempty"`

	// ActiveThreadPercentage caps the share of SMs an SMSharing client may
	// use (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE), 1-100. Only for SMSharing.
	ActiveThreadPercentage *int32 `json:"activeThreadPercentage,omitempty"`
}
