// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

import "time"

// The data a claim's status.devices entries carry for a gpufrac share: the
// kubelet plugin writes it (internal/node/claimstatus), kubectl-gpufrac
// reads it (status, why).

// MPSServer is the state of a claim's MPS server the status reports.
type MPSServer struct {
	Ready   bool
	Reason  string
	Message string
	Since   time.Time
}

// DeviceData is the driver-specific data of a share in status.devices.
type DeviceData struct {
	UUID          string `json:"uuid"`
	MemoryRequest string `json:"memoryRequest"`
	MemoryLimit   string `json:"memoryLimit"`
	ComputeMode   string `json:"computeMode"`
	Enforcement   string `json:"enforcement"`
	// MPSServer is the host pipe directory the share's containers join:
	// the GPU daemon's, or (MPS v3) the claim's namespace's on it.
	MPSServer              string `json:"mpsServer,omitempty"`
	ActiveThreadPercentage *int32 `json:"activeThreadPercentage,omitempty"`
	// Enforced says plainly what is and is not enforced for the share on
	// its node (ShareEnforced, AdminEnforced).
	Enforced string `json:"enforced,omitempty"`
	// AdminAccess marks a device allocated with DRA's adminAccess (a
	// monitoring pod): no limits, no MPS, not counted.
	AdminAccess bool `json:"adminAccess,omitempty"`
}
