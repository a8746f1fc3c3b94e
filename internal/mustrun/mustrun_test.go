// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mustrun_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// recorder is a testing.TB that records whether it was skipped or failed.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(...any)           { r.skipped = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestNeedSkipsOrFails(t *testing.T) {
	for _, tc := range []struct {
		env                   string
		have                  bool
		wantSkipped, wantFail bool
	}{
		{env: "", have: true},
		{env: "required", have: true},
		{env: "", have: false, wantSkipped: true},
		{env: "required", have: false, wantFail: true},
	} {
		t.Setenv("GPUFRAC_E2E", tc.env)
		r := &recorder{TB: t}
		mustrun.Need(r, tc.have, "gcc")
		if r.skipped != tc.wantSkipped || r.failed != tc.wantFail {
			t.Errorf("GPUFRAC_E2E=%q have=%v: skipped %v failed %v, want %v %v", tc.env, tc.have, r.skipped, r.failed, tc.wantSkipped, tc.wantFail)
		}
	}
}
