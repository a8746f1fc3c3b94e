// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"reflect"
	"testing"
)

func equalConfigs(a, b *FractionConfig) bool {
	if (a == nil) != (b == nil) {
		return false
	}
	if a == nil {
		return true
	}
	if (a.MemoryLimit == nil) != (b.MemoryLimit == nil) ||
		a.MemoryLimit != nil && a.MemoryLimit.Cmp(*b.MemoryLimit) != 0 {
		return false
	}
	return a.TypeMeta == b.TypeMeta && a.ComputeMode == b.ComputeMode &&
		reflect.DeepEqual(a.ActiveThreadPercentage, b.ActiveThreadPercentage)
}

func TestMerge(t *testing.T) {
	tm := typeMeta()
	tests := []struct {
		name    string
		configs []*FractionConfig
		want    *FractionConfig
	}{{
		name: "nothing",
		want: &FractionConfig{TypeMeta: tm},
	}, {
		name:    "nil inputs are skipped",
		configs: []*FractionConfig{nil, {MemoryLimit: qty("60Gi")}, nil},
		want:    &FractionConfig{TypeMeta: tm, MemoryLimit: qty("60Gi")},
	}, {
		name: "class SMSharing, claim memoryLimit: SMSharing kept",
		configs: []*FractionConfig{
			{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
			{MemoryLimit: qty("60Gi")},
		},
		want: &FractionConfig{TypeMeta: tm, MemoryLimit: qty("60Gi"), ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
	}, {
		name: "claim mode overrides class mode",
		configs: []*FractionConfig{
			{ComputeMode: TimeSlicing, MemoryLimit: qty("20Gi")},
			{ComputeMode: SMSharing},
		},
		want: &FractionConfig{TypeMeta: tm, MemoryLimit: qty("20Gi"), ComputeMode: SMSharing},
	}, {
		name: "later memoryLimit wins",
		configs: []*FractionConfig{
			{MemoryLimit: qty("20Gi")},
			{MemoryLimit: qty("60Gi")},
		},
		want: &FractionConfig{TypeMeta: tm, MemoryLimit: qty("60Gi")},
	}, {
		name: "switching away from SMSharing drops the inherited activeThreadPercentage",
		configs: []*FractionConfig{
			{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
			{ComputeMode: TimeSlicing},
		},
		want: &FractionConfig{TypeMeta: tm, ComputeMode: TimeSlicing},
	}, {
		name: "restating the same mode keeps it",
		configs: []*FractionConfig{
			{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
			{ComputeMode: SMSharing},
		},
		want: &FractionConfig{TypeMeta: tm, ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
	}, {
		name: "a claim's own activeThreadPercentage wins",
		configs: []*FractionConfig{
			{ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
			{ActiveThreadPercentage: ptr[int32](25)},
		},
		want: &FractionConfig{TypeMeta: tm, ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](25)},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Merge(tt.configs...); !equalConfigs(got, tt.want) {
				t.Errorf("\n got: %+v\nwant: %+v", got, tt.want)
			}
		})
	}
}

func TestMergeSharesNoMemory(t *testing.T) {
	class := &FractionConfig{MemoryLimit: qty("60Gi"), ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)}
	merged := Merge(class)
	merged.MemoryLimit.Set(1)
	*merged.ActiveThreadPercentage = 1
	if class.MemoryLimit.String() != "60Gi" || *class.ActiveThreadPercentage != 50 {
		t.Errorf("changing the merged config changed its input: %+v", class)
	}
}

func TestDeepCopy(t *testing.T) {
	orig := &FractionConfig{TypeMeta: typeMeta(), MemoryLimit: qty("60Gi"), ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)}
	cp := orig.DeepCopy()
	if !equalConfigs(orig, cp) {
		t.Fatalf("copy differs: %+v", cp)
	}
	cp.MemoryLimit.Set(1)
	*cp.ActiveThreadPercentage = 1
	if orig.MemoryLimit.String() != "60Gi" || *orig.ActiveThreadPercentage != 50 {
		t.Errorf("changing the copy changed the original: %+v", orig)
	}
	if (*FractionConfig)(nil).DeepCopy() != nil {
		t.Error("copy of nil is not nil")
	}
}
