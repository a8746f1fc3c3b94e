// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"strings"
	"testing"
)

func TestNamespaceLimits(t *testing.T) {
	for _, tc := range []struct {
		in   NamespaceLimits
		want NamespaceLimits
		err  string
	}{
		{in: NamespaceLimits{}, want: DefaultSafetyLimits},
		{in: NamespaceLimits{PinnedMemoryMiB: 256}, want: NamespaceLimits{PinnedMemoryMiB: 256, ActiveThreadPercentage: 1}},
		{in: NamespaceLimits{PinnedMemoryMiB: 1, ActiveThreadPercentage: 100}, want: NamespaceLimits{PinnedMemoryMiB: 1, ActiveThreadPercentage: 100}},
		{in: NamespaceLimits{PinnedMemoryMiB: -5}, err: "pinned memory limit -5 MiB: must be at least 1 MiB"},
		{in: NamespaceLimits{ActiveThreadPercentage: 101}, err: "active thread percentage 101: must be 1 to 100"},
		{in: NamespaceLimits{ActiveThreadPercentage: -1}, err: "active thread percentage -1: must be 1 to 100"},
	} {
		got, err := tc.in.withDefaults()
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: got %v, want %q", tc.in, err, tc.err)
			}
			if tc.in.Validate() == nil {
				t.Errorf("%+v: Validate accepts it", tc.in)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
