// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// ModeConflictError is a share whose compute mode cannot run beside the
// claims already prepared on its GPU. It is not permanent: it clears when
// those claims go.
type ModeConflictError struct {
	GPU       string
	Device    string
	Mode      v1alpha1.ComputeMode
	Conflicts []string // namespace/name of the prepared claims in the other mode
}

func (e *ModeConflictError) Error() string {
	other := v1alpha1.SMSharing
	if e.Mode == v1alpha1.SMSharing {
		other = v1alpha1.TimeSlicing
	}
	article := "a"
	if e.Mode == v1alpha1.SMSharing {
		article = "an"
	}
	return fmt.Sprintf("GPU %s (%s) already serves %s claims (%s); %s %s claim cannot share it, because the GPU's legacy MPS server runs it in EXCLUSIVE_PROCESS mode, where only MPS clients may create CUDA contexts (MPS v3, driver r615 and later, mixes them). "+
		"Keep the modes on different GPUs (start the plugin with --sm-sharing-gpus and use the shipped DeviceClasses), or wait for those claims to end",
		e.GPU, e.Device, other, strings.Join(e.Conflicts, ", "), article, e.Mode)
}

// CheckModeConflicts refuses a claim whose shares would put TimeSlicing and
// SMSharing clients on one GPU served by legacy MPS, given the claims
// prepared on the node. Under MPS v3 the GPU stays in the DEFAULT compute
// mode and TimeSlicing containers keep their own CUDA contexts beside the
// shared server, so the modes mix.
func CheckModeConflicts(c *Claim, prepared []Claim) error {
	for _, d := range c.Devices {
		if !d.Counted() {
			continue // an adminAccess device runs in no compute mode
		}
		var conflicts []string
		for _, p := range prepared {
			if p.UID == c.UID {
				continue
			}
			for _, pd := range p.Devices {
				if pd.Counted() && pd.GPU.UUID == d.GPU.UUID && pd.ComputeMode != d.ComputeMode && !mpsV3(d, pd) {
					conflicts = append(conflicts, p.Namespace+"/"+p.Name)
					break
				}
			}
		}
		if len(conflicts) > 0 {
			slices.Sort(conflicts)
			return &ModeConflictError{GPU: d.GPU.UUID, Device: d.Device, Mode: d.ComputeMode, Conflicts: conflicts}
		}
	}
	return nil
}

// mpsV3 tells whether the SMSharing one of two shares of different modes
// runs on an MPS v3 server.
func mpsV3(a, b Device) bool {
	for _, d := range []Device{a, b} {
		if d.MPS != nil {
			return d.MPS.Version == domain.MPSVersionV3
		}
	}
	return false
}
