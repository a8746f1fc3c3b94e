package domain_test

import (
	"testing"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

func TestParseSimulatedGPUs(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []domain.SimulatedGroup
		err  string
	}{
		{spec: "h200x8", want: []domain.SimulatedGroup{{"h200", 8}}},
		{spec: "H100x4, a100x2", want: []domain.SimulatedGroup{{"h100", 4}, {"a100", 2}}},
		{spec: "h200", err: `simulated GPUs "h200": "h200" is not MODELxCOUNT (e.g. h200x8)`},
		{spec: "v100x2", err: `simulated GPUs "v100x2": unknown model "v100", known: a100, a100-40g, a30, b200, h100, h200`},
		{spec: "h200x0", err: `simulated GPUs "h200x0": count "0" must be a number from 1 to 256`},
		{spec: "h200xmany", err: `simulated GPUs "h200xmany": count "many" must be a number from 1 to 256`},
	} {
		got, err := domain.ParseSimulatedGPUs(tc.spec)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("Parse(%q) error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || len(got) != len(tc.want) {
			t.Fatalf("Parse(%q) = %v, %v; want %v", tc.spec, got, err, tc.want)
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("Parse(%q)[%d] = %v, want %v", tc.spec, i, got[i], tc.want[i])
			}
		}
	}
}
