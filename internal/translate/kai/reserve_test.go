// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai_test

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// TestReserveOneRule: the webhook (Translate) and the template loop
// (TemplateFor) hold --kai-reserved-gpu-memory-mib to one rule. A reserve
// the loop refuses must be refused by the webhook too, or the webhook
// admits a pod whose template is never created (issue 34).
func TestReserveOneRule(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reserved int64
		want     string // empty: both accept
	}{
		{"no reserve", 0, ""},
		{"KAI's binder reserve of 1 GiB", 1024, ""},
		{"a negative reserve", -50000, "reservedMiB: -50000: must be from 0 to 1073741824 MiB (1Pi)"},
		{"one MiB below zero", -1, "reservedMiB: -1: must be from 0"},
		{"past 1Pi", 1<<30 + 1, "reservedMiB: 1073741825: must be from 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := kai.ValidateReservedMiB(tc.reserved); (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("ValidateReservedMiB(%d) = %v, want %q", tc.reserved, err, tc.want)
			}
			p := pod(map[string]string{kai.AnnotationFraction: "0.5"}, "main")
			res, err := kai.Translate(p, kai.Options{GPUMemorySizes: sizes, ReservedMiB: tc.reserved})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("the webhook's Translate: got %v, want a refusal containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("the webhook's Translate refused: %v", err)
			}
			// The loop recomputes the template from what the webhook
			// recorded: what one accepted, the other accepts.
			if _, err := kai.TemplateFor(res.Pod, kai.Options{}); err != nil {
				t.Errorf("the template loop refused what the webhook admitted: %v", err)
			}
		})
	}
}
