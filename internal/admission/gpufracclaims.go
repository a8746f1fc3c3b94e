// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpufrac/gpufrac/internal/deviceclass"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// usesGPUFrac reports whether a claim spec may draw from gpufrac: it
// carries a gpufrac.dev opaque config, or one of its requests names a
// DeviceClass that may use gpufrac (mayUse: deviceclass.MayUseGpufrac).
func usesGPUFrac(spec *resourceapi.ResourceClaimSpec, mayUse func(class string) bool) bool {
	if deviceclass.CarriesGpufracConfig(spec) {
		return true
	}
	for range deviceclass.GpufracRequests(spec, mayUse) {
		return true
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
	mayUse := deviceclass.Names(s.Cluster.DeviceClasses(), deviceclass.MayUseGpufrac)
	for _, pc := range original.Spec.ResourceClaims {
		gpufrac[pc.Name] = usesGPUFrac(s.Cluster.ClaimSpec(original.Namespace, pc), mayUse)
	}
	var warnings []string
	translated.EachContainer(pod, func(c *corev1.Container) {
		for _, rc := range c.Resources.Claims {
			if gpufrac[rc.Name] {
				warnings = append(warnings, translated.StripNVIDIAEnv(c)...)
				break
			}
		}
	})
	return warnings
}
