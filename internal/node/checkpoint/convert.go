// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	v1 "github.com/gpufrac/gpufrac/internal/node/checkpoint/api/v1"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// decodeEntryV1 reads one version 1 entry tolerantly (unknown fields are
// ignored) and checks that this plugin understands everything that decides
// what Unprepare must undo; an error means the entry must be quarantined.
func decodeEntryV1(key string, raw []byte) (Entry, error) {
	var e v1.Entry
	if err := json.Unmarshal(raw, &e); err != nil {
		return Entry{}, fmt.Errorf("decoding: %w", err)
	}
	if err := understoodV1(key, &e); err != nil {
		return Entry{}, err
	}
	return fromV1(&e), nil
}

// understoodV1 rejects values a later release may write with a meaning
// this one does not know: acting on them could undo the wrong thing.
func understoodV1(key string, e *v1.Entry) error {
	var errs []error
	if e.State != v1.StateStarted && e.State != v1.StateCompleted {
		errs = append(errs, fmt.Errorf("state %q is not one of %s, %s", e.State, v1.StateStarted, v1.StateCompleted))
	}
	if e.Plan.UID != key {
		errs = append(errs, fmt.Errorf("plan.uid %q differs from the entry's key %q", e.Plan.UID, key))
	}
	if e.Plan.Namespace == "" || e.Plan.Name == "" {
		errs = append(errs, errors.New("plan.namespace and plan.name must be set"))
	}
	if len(e.Plan.Devices) == 0 {
		errs = append(errs, errors.New("plan.devices is empty"))
	}
	for i, d := range e.Plan.Devices {
		if d.GPU.UUID == "" {
			errs = append(errs, fmt.Errorf("plan.devices[%d].gpu.UUID is empty", i))
		}
		switch v1alpha1.ComputeMode(d.ComputeMode) {
		case v1alpha1.TimeSlicing, v1alpha1.SMSharing:
		case "":
			if !d.AdminAccess {
				errs = append(errs, fmt.Errorf("plan.devices[%d].computeMode is empty on a device without adminAccess", i))
			}
		default:
			errs = append(errs, fmt.Errorf("plan.devices[%d].computeMode %q is not one of %s, %s", i, d.ComputeMode, v1alpha1.TimeSlicing, v1alpha1.SMSharing))
		}
		if _, err := domain.ParseEnforcement(d.Enforcement); err != nil {
			errs = append(errs, fmt.Errorf("plan.devices[%d].enforcement: %w", i, err))
		}
		if d.MPS != nil {
			errs = append(errs, understoodMPSV1(i, d.MPS)...)
		}
	}
	return errors.Join(errs...)
}

// understoodMPSV1 checks a share's MPS binding: its version, and that the
// node server's list is there exactly when the version says so.
func understoodMPSV1(i int, b *v1.MPSBinding) []error {
	switch b.Version {
	case "", domain.MPSVersionV3:
		if len(b.ServerGPUs) > 0 {
			return []error{fmt.Errorf("plan.devices[%d].mps.serverGPUs is set but mps.version is %q, not %s", i, b.Version, v1.MPSVersionV3NodeServer)}
		}
	case v1.MPSVersionV3NodeServer:
		if len(b.ServerGPUs) == 0 {
			return []error{fmt.Errorf("plan.devices[%d].mps.version is %s but mps.serverGPUs is empty", i, v1.MPSVersionV3NodeServer)}
		}
	default:
		return []error{fmt.Errorf("plan.devices[%d].mps.version %q is not empty (legacy), %s or %s", i, b.Version, domain.MPSVersionV3, v1.MPSVersionV3NodeServer)}
	}
	return nil
}

func fromV1(e *v1.Entry) Entry {
	out := Entry{State: State(e.State), Plan: plan.Claim{
		UID: types.UID(e.Plan.UID), Namespace: e.Plan.Namespace, Name: e.Plan.Name,
		Devices: make([]plan.Device, len(e.Plan.Devices)),
	}}
	for i, d := range e.Plan.Devices {
		pd := plan.Device{
			Request: d.Request, Pool: d.Pool, Device: d.Device,
			GPU: domain.GPU{
				UUID: d.GPU.UUID, Index: d.GPU.Index, Minor: d.GPU.Minor, ProductName: d.GPU.ProductName,
				Architecture: d.GPU.Architecture, Brand: d.GPU.Brand, CUDAComputeCapability: d.GPU.CUDAComputeCapability,
				PCIBusID: d.GPU.PCIBusID, PCIeRoot: d.GPU.PCIeRoot, MemoryBytes: d.GPU.MemoryBytes, ComputeModes: d.GPU.ComputeModes,
			},
			SoftLimitBytes: d.SoftLimitBytes, HardLimitBytes: d.HardLimitBytes,
			ComputeMode:            v1alpha1.ComputeMode(d.ComputeMode),
			ActiveThreadPercentage: d.ActiveThreadPercentage,
			Enforcement:            domain.Enforcement(d.Enforcement),
			AdminAccess:            d.AdminAccess,
		}
		if d.ShareID != nil {
			id := types.UID(*d.ShareID)
			pd.ShareID = &id
		}
		if d.MIG != nil {
			pd.MIG = &domain.MIGRef{ParentUUID: d.MIG.ParentUUID, GIID: d.MIG.GIID, CIID: d.MIG.CIID, Profile: d.MIG.Profile}
		}
		if d.MPS != nil {
			pd.MPS = &mpslayout.Binding{GPUUUID: d.MPS.GPUUUID, PipeDir: d.MPS.PipeDir, LogDir: d.MPS.LogDir,
				ShmDir: d.MPS.ShmDir, Version: d.MPS.Version, Namespace: d.MPS.Namespace}
			if d.MPS.Version == v1.MPSVersionV3NodeServer {
				pd.MPS.Version, pd.MPS.ServerGPUs = domain.MPSVersionV3, slices.Clone(d.MPS.ServerGPUs)
			}
		}
		out.Plan.Devices[i] = pd
	}
	return out
}

func toV1(e *Entry) v1.Entry {
	out := v1.Entry{State: string(e.State), Plan: v1.Claim{
		UID: string(e.Plan.UID), Namespace: e.Plan.Namespace, Name: e.Plan.Name,
		Devices: make([]v1.Device, len(e.Plan.Devices)),
	}}
	for i, d := range e.Plan.Devices {
		vd := v1.Device{
			Request: d.Request, Pool: d.Pool, Device: d.Device,
			GPU: v1.GPU{
				UUID: d.GPU.UUID, Index: d.GPU.Index, Minor: d.GPU.Minor, ProductName: d.GPU.ProductName,
				Architecture: d.GPU.Architecture, Brand: d.GPU.Brand, CUDAComputeCapability: d.GPU.CUDAComputeCapability,
				PCIBusID: d.GPU.PCIBusID, PCIeRoot: d.GPU.PCIeRoot, MemoryBytes: d.GPU.MemoryBytes, ComputeModes: d.GPU.ComputeModes,
			},
			SoftLimitBytes: d.SoftLimitBytes, HardLimitBytes: d.HardLimitBytes,
			ComputeMode:            string(d.ComputeMode),
			ActiveThreadPercentage: d.ActiveThreadPercentage,
			Enforcement:            string(d.Enforcement),
			AdminAccess:            d.AdminAccess,
		}
		if d.ShareID != nil {
			id := string(*d.ShareID)
			vd.ShareID = &id
		}
		if d.MIG != nil {
			vd.MIG = &v1.MIGRef{ParentUUID: d.MIG.ParentUUID, GIID: d.MIG.GIID, CIID: d.MIG.CIID, Profile: d.MIG.Profile}
		}
		if d.MPS != nil {
			vd.MPS = &v1.MPSBinding{GPUUUID: d.MPS.GPUUUID, PipeDir: d.MPS.PipeDir, LogDir: d.MPS.LogDir,
				ShmDir: d.MPS.ShmDir, Version: d.MPS.Version, Namespace: d.MPS.Namespace}
			if len(d.MPS.ServerGPUs) > 0 {
				// The node server is MPS v3 only (internal/core/plan).
				vd.MPS.Version, vd.MPS.ServerGPUs = v1.MPSVersionV3NodeServer, slices.Clone(d.MPS.ServerGPUs)
			}
		}
		out.Plan.Devices[i] = vd
	}
	return out
}

// encodeEntry renders an entry in the version this release writes.
func encodeEntry(e *Entry) ([]byte, error) {
	v := toV1(e)
	raw, err := json.Marshal(&v)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint entry of claim %s: %w", e.Plan.UID, err)
	}
	return raw, nil
}
