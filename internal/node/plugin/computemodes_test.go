// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

func TestAssignComputeModes(t *testing.T) {
	inv := &domain.Inventory{GPUs: []domain.GPU{{Index: 0}, {Index: 1}, {Index: 2}}}
	modes := func() []string {
		var out []string
		for _, g := range inv.GPUs {
			out = append(out, g.ComputeModes)
		}
		return out
	}
	for _, tc := range []struct {
		setting string
		want    []string
		err     string
	}{
		{"", []string{"Any", "Any", "Any"}, ""},
		{"all", []string{"SMSharing", "SMSharing", "SMSharing"}, ""},
		{"none", []string{"TimeSlicing", "TimeSlicing", "TimeSlicing"}, ""},
		{"0, 2", []string{"SMSharing", "TimeSlicing", "SMSharing"}, ""},
		{"7", nil, `--sm-sharing-gpus "7": this node has no GPU 7`},
		{"first", nil, `--sm-sharing-gpus "first": "first" is not a GPU index (want all, none or a list such as 0,1)`},
	} {
		err := assignComputeModes(inv, tc.setting)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.setting, err, tc.err)
			}
			continue
		}
		if got := modes(); err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%q: %v %v, want %v", tc.setting, got, err, tc.want)
		}
	}
}

// computeModesAt gives a GPU that starts serving fractions later what
// assignComputeModes gives those discovered at start; it names a GPU the
// node did not have then without complaint.
func TestComputeModesAt(t *testing.T) {
	for _, tc := range []struct {
		setting string
		index   int
		want    string
	}{
		{"", 3, domain.ComputeModesAny},
		{"all", 3, domain.ComputeModesSMSharing},
		{"none", 3, domain.ComputeModesTimeSlicing},
		{"0,3", 3, domain.ComputeModesSMSharing},
		{"0,2", 3, domain.ComputeModesTimeSlicing},
	} {
		if got, err := computeModesAt(tc.setting, tc.index); err != nil || got != tc.want {
			t.Errorf("%q, GPU %d: %q %v, want %q", tc.setting, tc.index, got, err, tc.want)
		}
	}
	if _, err := computeModesAt("first", 0); err == nil {
		t.Error(`"first" accepted`)
	}
}
