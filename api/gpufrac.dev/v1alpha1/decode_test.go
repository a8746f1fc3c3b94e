// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

var params = field.NewPath("parameters")

func ptr[T any](v T) *T { return &v }

func qty(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

// errStrings renders every error in full, so that a test pins the whole
// message a user will read, path and reason included.
func errStrings(errs field.ErrorList) []string {
	var out []string
	for _, e := range errs {
		out = append(out, e.Error())
	}
	return out
}

func TestDecode(t *testing.T) {
	const head = `"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig"`
	tests := []struct {
		name string
		data string
		want *FractionConfig // nil: not compared
		errs []string
	}{{
		name: "minimal",
		data: `{` + head + `}`,
		want: &FractionConfig{TypeMeta: typeMeta()},
	}, {
		name: "full SMSharing",
		data: `{` + head + `,"memoryLimit":"60Gi","computeMode":"SMSharing","activeThreadPercentage":50}`,
		want: &FractionConfig{TypeMeta: typeMeta(), MemoryLimit: qty("60Gi"), ComputeMode: SMSharing, ActiveThreadPercentage: ptr[int32](50)},
	}, {
		name: "memoryLimit as a number of bytes",
		data: `{` + head + `,"memoryLimit":1073741824}`,
		want: &FractionConfig{TypeMeta: typeMeta(), MemoryLimit: qty("1073741824")},
	}, {
		name: "null is unset",
		data: `{` + head + `,"memoryLimit":null,"computeMode":null,"activeThreadPercentage":null}`,
		want: &FractionConfig{TypeMeta: typeMeta()},
	}, {
		name: "unknown field",
		data: `{` + head + `,"memoryLimt":"60Gi"}`,
		want: &FractionConfig{TypeMeta: typeMeta()},
		errs: []string{`parameters: Forbidden: unknown field "memoryLimt"`},
	}, {
		name: "field names are case-sensitive",
		data: `{` + head + `,"MemoryLimit":"60Gi"}`,
		errs: []string{`parameters: Forbidden: unknown field "MemoryLimit"`},
	}, {
		name: "an unknown field given twice is reported once",
		data: `{` + head + `,"gpus":1,"gpus":2}`,
		errs: []string{`parameters: Forbidden: unknown field "gpus"`},
	}, {
		name: "duplicate field",
		data: `{` + head + `,"memoryLimit":"60Gi","memoryLimit":"70Gi"}`,
		want: &FractionConfig{TypeMeta: typeMeta(), MemoryLimit: qty("60Gi")},
		errs: []string{`parameters: Forbidden: duplicate field "memoryLimit"`},
	}, {
		name: "wrong apiVersion",
		data: `{"apiVersion":"gpufrac.dev/v1","kind":"FractionConfig"}`,
		errs: []string{`parameters.apiVersion: Unsupported value: "gpufrac.dev/v1": supported values: "gpufrac.dev/v1alpha1"`},
	}, {
		name: "missing apiVersion",
		data: `{"kind":"FractionConfig"}`,
		errs: []string{`parameters.apiVersion: Required value: must be "gpufrac.dev/v1alpha1"`},
	}, {
		name: "wrong kind",
		data: `{"apiVersion":"gpufrac.dev/v1alpha1","kind":"GpuConfig"}`,
		errs: []string{`parameters.kind: Unsupported value: "GpuConfig": supported values: "FractionConfig"`},
	}, {
		name: "missing kind",
		data: `{"apiVersion":"gpufrac.dev/v1alpha1"}`,
		errs: []string{`parameters.kind: Required value: must be "FractionConfig"`},
	}, {
		name: "empty object",
		data: `{}`,
		errs: []string{
			`parameters.apiVersion: Required value: must be "gpufrac.dev/v1alpha1"`,
			`parameters.kind: Required value: must be "FractionConfig"`,
		},
	}, {
		name: "bad quantity",
		data: `{` + head + `,"memoryLimit":"lots"}`,
		errs: []string{`parameters.memoryLimit: Invalid value: "lots": quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'`},
	}, {
		name: "computeMode not a string",
		data: `{` + head + `,"computeMode":1}`,
		errs: []string{`parameters.computeMode: Invalid value: 1: must be a string`},
	}, {
		name: "activeThreadPercentage as a string",
		data: `{` + head + `,"activeThreadPercentage":"50"}`,
		errs: []string{`parameters.activeThreadPercentage: Invalid value: "50": must be an integer`},
	}, {
		name: "activeThreadPercentage not whole",
		data: `{` + head + `,"activeThreadPercentage":50.5}`,
		errs: []string{`parameters.activeThreadPercentage: Invalid value: "50.5": must be an integer`},
	}, {
		name: "activeThreadPercentage beyond int32",
		data: `{` + head + `,"activeThreadPercentage":4294967296}`,
		errs: []string{`parameters.activeThreadPercentage: Invalid value: 4294967296: must be between 1 and 100`},
	}, {
		name: "kind of the wrong type is reported once",
		data: `{"apiVersion":"gpufrac.dev/v1alpha1","kind":["FractionConfig"]}`,
		errs: []string{`parameters.kind: Invalid value: ["FractionConfig"]: must be a string`},
	}, {
		name: "every problem at once",
		data: `{"apiVersion":"gpufrac.dev/v2","memoryLimt":"1Gi","computeMode":true,"computeMode":"SMSharing"}`,
		errs: []string{
			`parameters: Forbidden: unknown field "memoryLimt"`,
			`parameters.computeMode: Invalid value: true: must be a string`,
			`parameters: Forbidden: duplicate field "computeMode"`,
			`parameters.apiVersion: Unsupported value: "gpufrac.dev/v2": supported values: "gpufrac.dev/v1alpha1"`,
			`parameters.kind: Required value: must be "FractionConfig"`,
		},
	}, {
		name: "empty",
		data: ``,
		errs: []string{`parameters: Required value: a FractionConfig object of apiVersion gpufrac.dev/v1alpha1 is required`},
	}, {
		name: "null",
		data: `null`,
		errs: []string{`parameters: Required value: a FractionConfig object of apiVersion gpufrac.dev/v1alpha1 is required`},
	}, {
		name: "not an object",
		data: `["FractionConfig"]`,
		errs: []string{`parameters: Invalid value: must be a JSON object (a FractionConfig)`},
	}, {
		name: "syntax error",
		data: `{"kind" "FractionConfig"}`,
		errs: []string{`parameters: Invalid value: not valid JSON at byte 8: expected colon after object key`},
	}, {
		name: "truncated",
		data: `{"kind":"FractionConfig"`,
		errs: []string{`parameters: Invalid value: not valid JSON: unexpected end of input`},
	}, {
		name: "trailing data",
		data: `{` + head + `} {}`,
		errs: []string{`parameters: Invalid value: not valid JSON: unexpected data after the top-level object`},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := Decode([]byte(tt.data), params)
			if g := errStrings(errs); !slices.Equal(g, tt.errs) {
				t.Errorf("errors:\n got: %q\nwant: %q", g, tt.errs)
			}
			if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
				t.Errorf("config:\n got: %+v\nwant: %+v", got, tt.want)
			}
		})
	}
}

func typeMeta() metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind}
}

// TestDecodeKnowsEveryField guards against adding a field to FractionConfig
// and forgetting to teach Decode about it (it would then be refused as
// unknown).
func TestDecodeKnowsEveryField(t *testing.T) {
	want := []string{"apiVersion", "kind"}
	typ := reflect.TypeFor[FractionConfig]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		want = append(want, name)
	}
	var got []string
	for k := range fieldDecoders {
		got = append(got, k)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("Decode knows %q, FractionConfig has %q", got, want)
	}
}
