// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan_test

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func TestCheckModeConflicts(t *testing.T) {
	ts := func(uid, name, dev, gpu string) plan.Claim {
		return plan.Claim{UID: types.UID("uid-" + uid), Namespace: "ns", Name: name, Devices: []plan.Device{
			share(dev, "s-"+uid, gpu, gib, gib, v1alpha1.TimeSlicing, domain.EnforcementDMem)}}
	}
	sm := func(uid, name, dev, gpu string) plan.Claim {
		c := ts(uid, name, dev, gpu)
		c.Devices[0].ComputeMode = v1alpha1.SMSharing
		return c
	}
	smV3 := func(uid, name, dev, gpu string) plan.Claim {
		c := sm(uid, name, dev, gpu)
		c.Devices[0].MPS = &mpslayout.Binding{GPUUUID: gpu, Version: domain.MPSVersionV3, Namespace: mpslayout.NamespaceFor(c.UID)}
		return c
	}
	prepared := []plan.Claim{ts("1", "train", "gpu-0", "GPU-0"), ts("2", "infer", "gpu-0", "GPU-0"), sm("3", "mps", "gpu-1", "GPU-1"),
		smV3("5", "mps3", "gpu-2", "GPU-2"), ts("6", "train3", "gpu-3", "GPU-3")}

	for _, tc := range []struct {
		name  string
		claim plan.Claim
		want  string
	}{
		{"TimeSlicing beside TimeSlicing", ts("4", "new", "gpu-0", "GPU-0"), ""},
		{"SMSharing beside SMSharing", sm("4", "new", "gpu-1", "GPU-1"), ""},
		{"SMSharing on a TimeSlicing GPU", sm("4", "new", "gpu-0", "GPU-0"),
			"GPU GPU-0 (gpu-0) already serves TimeSlicing claims (ns/infer, ns/train); an SMSharing claim cannot share it, because the GPU's legacy MPS server runs it in EXCLUSIVE_PROCESS mode, where only MPS clients may create CUDA contexts (MPS v3, driver r615 and later, mixes them). " +
				"Keep the modes on different GPUs (start the plugin with --sm-sharing-gpus and use the shipped DeviceClasses), or wait for those claims to end"},
		{"TimeSlicing on an SMSharing GPU", ts("4", "new", "gpu-1", "GPU-1"),
			"GPU GPU-1 (gpu-1) already serves SMSharing claims (ns/mps); a TimeSlicing claim cannot share it, because the GPU's legacy MPS server runs it in EXCLUSIVE_PROCESS mode, where only MPS clients may create CUDA contexts (MPS v3, driver r615 and later, mixes them). " +
				"Keep the modes on different GPUs (start the plugin with --sm-sharing-gpus and use the shipped DeviceClasses), or wait for those claims to end"},
		{"a claim never conflicts with itself", ts("3", "mps", "gpu-1", "GPU-1"), ""},
		// MPS v3 leaves the GPU in DEFAULT compute mode.
		{"TimeSlicing beside an MPS v3 server", ts("4", "new", "gpu-2", "GPU-2"), ""},
		{"MPS v3 SMSharing on a TimeSlicing GPU", smV3("4", "new", "gpu-3", "GPU-3"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := plan.CheckModeConflicts(&tc.claim, prepared)
			if tc.want == "" {
				if err != nil {
					t.Errorf("unexpected conflict: %v", err)
				}
				return
			}
			var mc *plan.ModeConflictError
			if !errors.As(err, &mc) || err.Error() != tc.want {
				t.Errorf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}
