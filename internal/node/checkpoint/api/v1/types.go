// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1

import "encoding/json"

// Version is the value of File.Version for this schema.
const Version = 1

// File is the whole checkpoint file. Checksum covers the exact bytes of
// Data, so a torn or hand-edited file is recognised.
type File struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Data is the checksummed payload. Claims are kept raw here so that each
// entry is decoded on its own: one entry that cannot be understood is
// quarantined without losing the others.
type Data struct {
	BootID string                     `json:"bootID"`
	Claims map[string]json.RawMessage `json:"claims"`
}

// States an Entry may have in version 1.
const (
	StateStarted   = "Started"
	StateCompleted = "Completed"
)

// Entry is one claim's record.
type Entry struct {
	State string `json:"state"`
	Plan  Claim  `json:"plan"`
}

// Claim is what was prepared for one ResourceClaim.
type Claim struct {
	UID       string   `json:"uid"`
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Devices   []Device `json:"devices"`
}

// Device is one allocated share.
type Device struct {
	Request                string      `json:"request"`
	Pool                   string      `json:"pool"`
	Device                 string      `json:"device"`
	ShareID                *string     `json:"shareID,omitempty"`
	GPU                    GPU         `json:"gpu"`
	SoftLimitBytes         int64       `json:"softLimitBytes"`
	HardLimitBytes         int64       `json:"hardLimitBytes"`
	ComputeMode            string      `json:"computeMode"`
	ActiveThreadPercentage *int32      `json:"activeThreadPercentage,omitempty"`
	Enforcement            string      `json:"enforcement"`
	MPS                    *MPSBinding `json:"mps,omitempty"`
	// AdminAccess (added in the same version, omitted when false, so
	// earlier entries read the same): a monitoring device, with no limits,
	// no MPS and an empty computeMode. A release that predates it
	// quarantines such an entry (its computeMode is not one it knows)
	// rather than take it for a share.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// MIG is set for a whole MIG instance (GPU then holds the instance's
	// UUID on its parent's minor); an older release ignores it and
	// quarantines the entry, whose UUID is none of its GPUs'.
	MIG *MIGRef `json:"mig,omitempty"`
}

// MIGRef records the MIG instance a share holds.
type MIGRef struct {
	ParentUUID string `json:"parentUUID"`
	GIID       int    `json:"giID"`
	CIID       int    `json:"ciID"`
	Profile    string `json:"profile"`
}

// GPU is the physical GPU a share is on. The names are the Go field names
// the first releases wrote (see the package rules).
type GPU struct {
	UUID                  string `json:"UUID"`
	Index                 int    `json:"Index"`
	Minor                 int    `json:"Minor"`
	ProductName           string `json:"ProductName"`
	Architecture          string `json:"Architecture"`
	Brand                 string `json:"Brand"`
	CUDAComputeCapability string `json:"CUDAComputeCapability"`
	PCIBusID              string `json:"PCIBusID"`
	PCIeRoot              string `json:"PCIeRoot"`
	MemoryBytes           uint64 `json:"MemoryBytes"`
	ComputeModes          string `json:"ComputeModes"`
}

// MPSBinding is where a share's MPS control daemon lives on the host.
type MPSBinding struct {
	GPUUUID   string `json:"gpuUUID"`
	PipeDir   string `json:"pipeDir"`
	LogDir    string `json:"logDir"`
	ShmDir    string `json:"shmDir"`
	Version   string `json:"version,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	// ServerGPUs (added in version 1, omitted for a per-GPU daemon, so
	// earlier entries read as per-GPU): every GPU of the node server the
	// share is a client of. Such a binding is written with Version
	// MPSVersionV3NodeServer: a release that predates the node server
	// would take the binding for GPUUUID's own daemon and, at Unprepare,
	// stop that daemon and remove the node server's directories; its
	// check of the version quarantines the entry instead.
	ServerGPUs []string `json:"serverGPUs,omitempty"`
}

// MPSVersionV3NodeServer is MPSBinding.Version of a client of the MPS v3
// node server (ServerGPUs set); "v3" is a per-GPU v3 daemon's.
const MPSVersionV3NodeServer = "v3-node-server"
