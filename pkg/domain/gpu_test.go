// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

func TestSemver(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"535.104.05", "535.104.5", ""},
		{"615.23", "615.23.0", ""},
		{"13.4", "13.4.0", ""},
		{"9.0", "9.0.0", ""},
		{"1.2.3.4", "", `version "1.2.3.4" has 4 parts, want 1 to 3`},
		{"550.x", "", `version "550.x": part "x" is not a number`},
	} {
		got, err := domain.Semver(tc.in)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Semver(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Semver(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseEnforcement(t *testing.T) {
	if _, err := domain.ParseEnforcement("cgroup"); err == nil || err.Error() != `memory enforcement "cgroup" is not one of dmem, mps, none` {
		t.Errorf("got %v", err)
	}
	if e, err := domain.ParseEnforcement("mps"); err != nil || e != domain.EnforcementMPS {
		t.Errorf("got %v %v", e, err)
	}
}
