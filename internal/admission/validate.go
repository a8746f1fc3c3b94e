// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"context"
	"encoding/json"
	"math"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpufrac/gpufrac/internal/manifestcheck"
)

// validate checks gpufrac.dev opaque configs in ResourceClaims,
// ResourceClaimTemplates and DeviceClasses with the code the driver and
// `kubectl gpufrac validate` use. The cluster's DeviceClasses come along,
// so a claim is judged under the compute mode its class sets.
func (s *Server) validate(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Operation != admissionv1.Create && req.Operation != admissionv1.Update {
		return allow()
	}
	inputs := []manifestcheck.Input{{Name: "request", Data: req.Object.Raw}}
	if req.Kind.Kind != "DeviceClass" {
		for _, c := range s.Cluster.DeviceClasses() {
			c = c.DeepCopy()
			c.APIVersion, c.Kind = "resource.k8s.io/v1", "DeviceClass"
			raw, err := json.Marshal(c)
			if err != nil {
				continue
			}
			inputs = append(inputs, manifestcheck.Input{Name: "class", Data: raw})
		}
	}
	var problems []string
	// Memory is bounded by the largest GPU the cluster publishes (or, with
	// none published yet, by gpufrac's catalog); the problem says which.
	opts := manifestcheck.Options{GPUMemorySizes: s.Cluster.GPUMemorySizes()}
	for _, r := range manifestcheck.CheckWith(opts, inputs...) {
		if r.Source != "request" || !r.Failed() {
			continue
		}
		problems = append(problems, r.LinesUpTo(math.MaxInt)...) // problemList counts what it leaves out
	}
	if len(problems) > 0 {
		return deny(http.StatusUnprocessableEntity, "invalid gpufrac.dev configuration: "+problemList(problems))
	}
	return allow()
}
