// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// FuzzDecodeValidate: whatever the bytes, decoding and validation never
// panic, and a config that decodes and validates cleanly, checked against a
// request and a GPU, yields a limit within [request, GPU memory].
func FuzzDecodeValidate(f *testing.F) {
	for _, seed := range []string{
		`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig"}`,
		`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"60Gi","computeMode":"SMSharing","activeThreadPercentage":50}`,
		`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"1e3"}`,
		`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":-1,"memoryLimt":"x"}`,
		`{"kind":"FractionConfig","kind":"FractionConfig"}`,
		`[]`, `null`, `{`, `{"computeMode":null}`,
	} {
		f.Add([]byte(seed), int64(40<<30), int64(141<<30))
	}
	f.Fuzz(func(t *testing.T, data []byte, request, gpu int64) {
		if request <= 0 || gpu <= 0 || request > gpu {
			return
		}
		cfg, errs := v1alpha1.Decode(data, field.NewPath("parameters"))
		if cfg == nil || len(errs) > 0 {
			return
		}
		if len(v1alpha1.Validate(cfg, field.NewPath("parameters"))) > 0 {
			return
		}
		req := *resource.NewQuantity(request, resource.BinarySI)
		mem := resource.NewQuantity(gpu, resource.BinarySI)
		if len(v1alpha1.ValidateAgainstRequest(cfg, req, mem, field.NewPath("parameters"))) > 0 {
			return
		}
		limit := v1alpha1.EffectiveLimit(cfg, req)
		if limit.Cmp(req) < 0 || limit.Cmp(*mem) > 0 {
			t.Fatalf("valid config %s gives limit %s outside [%s, %s]", data, limit.String(), req.String(), mem.String())
		}
		if m := cfg.EffectiveComputeMode(); m != v1alpha1.TimeSlicing && m != v1alpha1.SMSharing {
			t.Fatalf("valid config %s has mode %q", data, m)
		}
	})
}
