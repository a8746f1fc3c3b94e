// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// planMIG plans a whole MIG instance. The container gets the instance and
// nothing is enforced inside it beyond what MIG partitions in hardware:
// NVIDIA's per-cgroup memory partitioning (the dmem and MPS v3 limits
// gpufrac sets elsewhere) does not support MIG
// (docs/design/nvidia/mig.md), so a config that asks for a memory
// limit, SMSharing or an active thread percentage on an instance is
// refused with the reason rather than ignored.
func planMIG(r resourceapi.DeviceRequestAllocationResult, m domain.MIGDevice, path *field.Path,
	allConfigs []resourceapi.DeviceAllocationConfiguration, configsPath *field.Path) (*Device, field.ErrorList) {
	cfg, errs := mergedConfig(allConfigs, configsPath, r)
	if cfg == nil {
		return nil, errs
	}
	cfgPath := path.Child("config")
	errs = append(errs, v1alpha1.Validate(cfg, cfgPath)...)
	if cfg.MemoryLimit != nil {
		errs = append(errs, field.Forbidden(cfgPath.Child("memoryLimit"), fmt.Sprintf(
			"device %s is a MIG instance (%s): its memory is partitioned by MIG in hardware, and NVIDIA's per-cgroup memory limits do not support MIG; remove memoryLimit or select a fraction class (type gpu)",
			r.Device, m.Profile)))
	}
	if cfg.EffectiveComputeMode() == v1alpha1.SMSharing {
		errs = append(errs, field.Forbidden(cfgPath.Child("computeMode"), fmt.Sprintf(
			"device %s is a MIG instance (%s), allocated whole: gpufrac runs no MPS server inside MIG instances; use TimeSlicing or a fraction class", r.Device, m.Profile)))
	}
	if cfg.ActiveThreadPercentage != nil {
		errs = append(errs, field.Forbidden(cfgPath.Child("activeThreadPercentage"), fmt.Sprintf(
			"device %s is a MIG instance (%s): its SMs are fixed by the profile (%d)", r.Device, m.Profile, m.Multiprocessors)))
	}
	mem := int64(m.MemoryBytes)
	return &Device{
		Request:        r.Request,
		Pool:           r.Pool,
		Device:         r.Device,
		ShareID:        r.ShareID,
		GPU:            m.AsGPU(),
		SoftLimitBytes: mem,
		HardLimitBytes: mem,
		ComputeMode:    v1alpha1.TimeSlicing,
		Enforcement:    domain.EnforcementNone,
		MIG:            m.Ref(),
	}, errs
}
