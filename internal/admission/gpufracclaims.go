// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// usesGPUFrac reports whether a claim spec draws from gpufrac: it carries
// a gpufrac.dev opaque config, or one of its requests names a DeviceClass
// that selects the gpufrac.dev driver or configures it.
func usesGPUFrac(spec *resourceapi.ResourceClaimSpec, classes []*resourceapi.DeviceClass) bool {
	if spec == nil {
		return false
	}
	for _, c := range spec.Devices.Config {
		if c.Opaque != nil && c.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	gpufracClass := map[string]bool{}
	for _, class := range classes {
		gpufracClass[class.Name] = classIsGPUFrac(class)
	}
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil && gpufracClass[r.Exactly.DeviceClassName] {
			return true
		}
		for _, sub := range r.FirstAvailable {
			if gpufracClass[sub.DeviceClassName] {
				return true
			}
		}
	}
	return false
}

func classIsGPUFrac(class *resourceapi.DeviceClass) bool {
	for _, c := range class.Spec.Config {
		if c.Opaque != nil && c.Opaque.Driver == v1alpha1.DriverName {
			return true
		}
	}
	for _, s := range class.Spec.Selectors {
		if s.CEL != nil && strings.Contains(s.CEL.Expression, strconv.Quote(v1alpha1.DriverName)) {
			return true
		}
	}
	return false
}

// stripGPUFracContainers removes the NVIDIA variables a pod may not set
// (memory, visible devices, driver capabilities) from every
// container of pod that uses one of its gpufrac claims (those of the
// original spec; a translation's own claim container is handled by
// internal/translate/kai), returning the warnings.
func (s *Server) stripGPUFracContainers(original, pod *corev1.Pod) []string {
	gpufrac := map[string]bool{}
	classes := s.Cluster.DeviceClasses()
	for _, pc := range original.Spec.ResourceClaims {
		gpufrac[pc.Name] = usesGPUFrac(s.Cluster.ClaimSpec(original.Namespace, pc), classes)
	}
	var warnings []string
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, rc := range list[i].Resources.Claims {
				if gpufrac[rc.Name] {
					warnings = append(warnings, translated.StripNVIDIAEnv(&list[i])...)
					break
				}
			}
		}
	}
	return warnings
}
