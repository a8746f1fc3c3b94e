// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  *FractionConfig
		errs []string
	}{{
		name: "nil asks for nothing",
	}, {
		name: "minimal",
		cfg:  &FractionConfig{},
	}, {
		name: "full TimeSlicing",
		cfg:  &FractionConfig{MemoryLimit: qty("60Gi"), ComputeMode: TimeSlicing},
	}, {
		name: "full SMSharing",
		cfg:  &FractionConfig{MemoryLimit: qty("60Gi"), ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
	}, {
		name: "activeThreadPercentage bounds are inclusive",
		cfg:  &FractionConfig{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](100)},
	}, {
		name: "limit 0",
		cfg:  &FractionConfig{MemoryLimit: qty("0")},
		errs: []string{`parameters.memoryLimit: Invalid value: "0": must be greater than zero`},
	}, {
		name: "negative limit",
		cfg:  &FractionConfig{MemoryLimit: qty("-1Gi")},
		errs: []string{`parameters.memoryLimit: Invalid value: "-1Gi": must be greater than zero`},
	}, {
		name: "bad mode",
		cfg:  &FractionConfig{ComputeMode: "Exclusive"},
		errs: []string{`parameters.computeMode: Unsupported value: "Exclusive": supported values: "TimeSlicing", "SMSharing"`},
	}, {
		name: "modes are case-sensitive",
		cfg:  &FractionConfig{ComputeMode: "smsharing"},
		errs: []string{`parameters.computeMode: Unsupported value: "smsharing": supported values: "TimeSlicing", "SMSharing"`},
	}, {
		name: "ATP 0",
		cfg:  &FractionConfig{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](0)},
		errs: []string{`parameters.activeThreadPercentage: Invalid value: 0: must be between 1 and 100`},
	}, {
		name: "ATP 101",
		cfg:  &FractionConfig{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](101)},
		errs: []string{`parameters.activeThreadPercentage: Invalid value: 101: must be between 1 and 100`},
	}, {
		name: "ATP with TimeSlicing",
		cfg:  &FractionConfig{ComputeMode: TimeSlicing, ActiveThreadPercentage: ptr[int32](50)},
		errs: []string{`parameters.activeThreadPercentage: Forbidden: only allowed with computeMode SMSharing, not TimeSlicing`},
	}, {
		name: "ATP with the default mode",
		cfg:  &FractionConfig{ActiveThreadPercentage: ptr[int32](50)},
		errs: []string{`parameters.activeThreadPercentage: Forbidden: only allowed with computeMode SMSharing, not TimeSlicing (the default when computeMode is unset)`},
	}, {
		name: "ATP with an unknown mode: only the mode is reported",
		cfg:  &FractionConfig{ComputeMode: "MIG", ActiveThreadPercentage: ptr[int32](50)},
		errs: []string{`parameters.computeMode: Unsupported value: "MIG": supported values: "TimeSlicing", "SMSharing"`},
	}, {
		name: "several problems, all reported",
		cfg:  &FractionConfig{MemoryLimit: qty("0"), ComputeMode: TimeSlicing, ActiveThreadPercentage: ptr[int32](101)},
		errs: []string{
			`parameters.memoryLimit: Invalid value: "0": must be greater than zero`,
			`parameters.activeThreadPercentage: Invalid value: 101: must be between 1 and 100`,
			`parameters.activeThreadPercentage: Forbidden: only allowed with computeMode SMSharing, not TimeSlicing`,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errStrings(Validate(tt.cfg, params)); !slices.Equal(got, tt.errs) {
				t.Errorf("\n got: %q\nwant: %q", got, tt.errs)
			}
		})
	}
}

// TestValidateAggregate pins the one-line form the kubelet plugin and the
// webhook put into their responses.
func TestValidateAggregate(t *testing.T) {
	errs := Validate(&FractionConfig{MemoryLimit: qty("-1"), ComputeMode: "Exclusive"}, params)
	const want = `[parameters.memoryLimit: Invalid value: "-1": must be greater than zero, ` +
		`parameters.computeMode: Unsupported value: "Exclusive": supported values: "TimeSlicing", "SMSharing"]`
	if got := errs.ToAggregate().Error(); got != want {
		t.Errorf("\n got: %s\nwant: %s", got, want)
	}
}

func TestValidateAgainstRequest(t *testing.T) {
	tests := []struct {
		name      string
		cfg       *FractionConfig
		request   string
		gpuMemory *resource.Quantity
		errs      []string
	}{{
		name:    "no config: the limit is the request",
		request: "40Gi",
	}, {
		name:    "no limit: the limit is the request",
		cfg:     &FractionConfig{ComputeMode: SMSharing},
		request: "40Gi", gpuMemory: qty("80Gi"),
	}, {
		name:    "limit equal to request",
		cfg:     &FractionConfig{MemoryLimit: qty("40Gi")},
		request: "40Gi",
	}, {
		name:    "limit above request, within the GPU",
		cfg:     &FractionConfig{MemoryLimit: qty("60Gi")},
		request: "40Gi", gpuMemory: qty("80Gi"),
	}, {
		name:    "limit equal to the GPU's memory",
		cfg:     &FractionConfig{MemoryLimit: qty("80Gi")},
		request: "40Gi", gpuMemory: qty("80Gi"),
	}, {
		name:    "limit below request",
		cfg:     &FractionConfig{MemoryLimit: qty("30Gi")},
		request: "40Gi",
		errs:    []string{`parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi`},
	}, {
		name:    "units differ",
		cfg:     &FractionConfig{MemoryLimit: qty("40G")},
		request: "40Gi",
		errs:    []string{`parameters.memoryLimit: Invalid value: "40G": must not be below the guaranteed memory request 40Gi`},
	}, {
		name:    "limit above the GPU's memory",
		cfg:     &FractionConfig{MemoryLimit: qty("100Gi")},
		request: "40Gi", gpuMemory: qty("81559Mi"),
		errs: []string{`parameters.memoryLimit: Invalid value: "100Gi": must not exceed the GPU's memory 81559Mi`},
	}, {
		name:    "GPU memory unknown: no upper bound",
		cfg:     &FractionConfig{MemoryLimit: qty("1Ti")},
		request: "40Gi",
	}, {
		name:    "a limit Validate refuses is not reported again",
		cfg:     &FractionConfig{MemoryLimit: qty("0")},
		request: "40Gi",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := ValidateAgainstRequest(tt.cfg, resource.MustParse(tt.request), tt.gpuMemory, params)
			if got := errStrings(errs); !slices.Equal(got, tt.errs) {
				t.Errorf("\n got: %q\nwant: %q", got, tt.errs)
			}
		})
	}
}

func TestEffectiveLimit(t *testing.T) {
	request := resource.MustParse("40Gi")
	for _, tt := range []struct {
		name string
		cfg  *FractionConfig
		want string
	}{
		{"nil config", nil, "40Gi"},
		{"unset", &FractionConfig{}, "40Gi"},
		{"set", &FractionConfig{MemoryLimit: qty("60Gi")}, "60Gi"},
	} {
		got := EffectiveLimit(tt.cfg, request)
		if got.String() != tt.want {
			t.Errorf("%s: got %s, want %s", tt.name, got.String(), tt.want)
		}
	}
	cfg := &FractionConfig{MemoryLimit: qty("60Gi")}
	got := EffectiveLimit(cfg, request)
	got.Add(resource.MustParse("1Gi"))
	if cfg.MemoryLimit.String() != "60Gi" {
		t.Errorf("EffectiveLimit returned the config's own quantity: changing it changed the config to %s", cfg.MemoryLimit.String())
	}
}

func TestDefault(t *testing.T) {
	cfg := &FractionConfig{MemoryLimit: qty("60Gi")}
	cfg.Default()
	want := &FractionConfig{TypeMeta: typeMeta(), MemoryLimit: qty("60Gi"), ComputeMode: TimeSlicing}
	if !equalConfigs(cfg, want) {
		t.Errorf("got %+v, want %+v", cfg, want)
	}
	sm := &FractionConfig{ComputeMode: SMSharing}
	sm.Default()
	if sm.ComputeMode != SMSharing {
		t.Errorf("Default overrode SMSharing with %s", sm.ComputeMode)
	}
	if sm.MemoryLimit != nil {
		t.Errorf("Default set memoryLimit to %s; it must stay unset until the request is known", sm.MemoryLimit.String())
	}
	(*FractionConfig)(nil).Default() // must not panic
}
