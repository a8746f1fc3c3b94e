// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

// deepCopied are the package's types with a DeepCopy, each as a pointer
// to its zero value; TestDeepCopiedListsEveryType keeps the list whole.
var deepCopied = []any{&FractionConfig{}}

// deepCopyLeaves are the types of other packages that fill gives a value
// of their own, which they deep-copy themselves: a field of any other type
// from outside this package fails the test until it is listed here.
var deepCopyLeaves = map[reflect.Type]reflect.Value{
	// Beyond int64, so the copy needs its own inf.Dec.
	reflect.TypeFor[resource.Quantity](): reflect.ValueOf(resource.MustParse("1.000000000000000000001Gi")),
}

// TestDeepCopyCopiesEveryField fills every field of every deep-copied type
// with a value other than its zero value, by reflection, so a field added
// later is covered without changing this test, and checks that the copy is
// equal and shares no pointer, slice or map with the original.
func TestDeepCopyCopiesEveryField(t *testing.T) {
	for _, zero := range deepCopied {
		typ := reflect.TypeOf(zero).Elem()
		t.Run(typ.Name(), func(t *testing.T) {
			orig := reflect.New(typ)
			fill(t, orig.Elem(), typ.Name())
			cp := orig.MethodByName("DeepCopy").Call(nil)[0]
			if !equality.Semantic.DeepEqual(orig.Interface(), cp.Interface()) {
				t.Errorf("the copy differs:\noriginal: %+v\ncopy:     %+v", orig.Elem(), cp.Elem())
			}
			for _, s := range shared(orig.Elem(), cp.Elem(), typ.Name()) {
				t.Errorf("the copy shares %s with the original", s)
			}
			// DeepCopyInto over a filled value leaves none of it behind.
			into := reflect.New(typ)
			fill(t, into.Elem(), typ.Name())
			orig.MethodByName("DeepCopyInto").Call([]reflect.Value{into})
			if !equality.Semantic.DeepEqual(orig.Interface(), into.Interface()) {
				t.Errorf("DeepCopyInto left a different value:\noriginal: %+v\ninto:     %+v", orig.Elem(), into.Elem())
			}
			if nilCopy := reflect.Zero(reflect.PointerTo(typ)).MethodByName("DeepCopy").Call(nil)[0]; !nilCopy.IsNil() {
				t.Error("the copy of nil is not nil")
			}
		})
	}
}

// fill sets v, and everything it holds, to a value other than the zero
// value; it fails the test on a type it does not know how to fill.
func fill(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	if leaf, ok := deepCopyLeaves[v.Type()]; ok {
		v.Set(leaf)
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("v-" + path)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(7.5)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), path)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			fill(t, v.Index(i), path+"[]")
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, path+"{key}")
		fill(t, e, path+"{}")
		v.SetMapIndex(k, e)
	case reflect.Struct:
		if pkg := v.Type().PkgPath(); pkg != reflect.TypeFor[FractionConfig]().PkgPath() && !strings.HasPrefix(pkg, "k8s.io/apimachinery/pkg/apis/meta/") {
			t.Fatalf("%s: fill does not know %s; list it in deepCopyLeaves if it deep-copies itself", path, v.Type())
		}
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				t.Fatalf("%s.%s: fill cannot set an unexported field", path, f.Name)
			}
			fill(t, v.Field(i), path+"."+f.Name)
			if v.Field(i).IsZero() {
				t.Fatalf("%s.%s is still its zero value", path, f.Name)
			}
		}
	default:
		t.Fatalf("%s: fill does not know the kind %s (%s)", path, v.Kind(), v.Type())
	}
}

// shared lists the pointers, slices and maps that a and b (a value and its
// copy) share, walking unexported fields too.
func shared(a, b reflect.Value, path string) []string {
	var out []string
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return nil
		}
		if a.Pointer() == b.Pointer() {
			out = append(out, path+" (pointer)")
		}
		out = append(out, shared(a.Elem(), b.Elem(), path)...)
	case reflect.Slice:
		if a.Len() > 0 && b.Len() > 0 && a.Pointer() == b.Pointer() {
			out = append(out, path+" (slice)")
		}
		for i := range min(a.Len(), b.Len()) {
			out = append(out, shared(a.Index(i), b.Index(i), path+"[]")...)
		}
	case reflect.Map:
		if !a.IsNil() && !b.IsNil() && a.Pointer() == b.Pointer() {
			out = append(out, path+" (map)")
		}
		for _, k := range a.MapKeys() {
			if bv := b.MapIndex(k); bv.IsValid() {
				out = append(out, shared(a.MapIndex(k), bv, path+"{}")...)
			}
		}
	case reflect.Struct:
		for i := range a.NumField() {
			out = append(out, shared(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name)...)
		}
	case reflect.Interface:
		if !a.IsNil() && !b.IsNil() {
			out = append(out, shared(a.Elem(), b.Elem(), path)...)
		}
	}
	return out
}

// TestSharedFindsAPlantedShare: the walk above reports a copy that shares
// a pointer with its original, which is what a shallow copy of a new
// pointer field would do.
func TestSharedFindsAPlantedShare(t *testing.T) {
	orig := &FractionConfig{}
	fill(t, reflect.ValueOf(orig).Elem(), "FractionConfig")
	shallow := *orig
	got := shared(reflect.ValueOf(orig).Elem(), reflect.ValueOf(&shallow).Elem(), "FractionConfig")
	for _, want := range []string{"FractionConfig.MemoryLimit (pointer)", "FractionConfig.ActiveThreadPercentage (pointer)"} {
		if !slices.Contains(got, want) {
			t.Errorf("a shallow copy: shared = %q, want %s among them", got, want)
		}
	}
}

// TestDeepCopiedListsEveryType: every type of the package with a
// DeepCopyInto method is in deepCopied, so the test above covers it.
func TestDeepCopiedListsEveryType(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var withCopy []string
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "DeepCopyInto" {
				continue
			}
			recv := fn.Recv.List[0].Type
			if star, ok := recv.(*ast.StarExpr); ok {
				recv = star.X
			}
			if id, ok := recv.(*ast.Ident); ok {
				withCopy = append(withCopy, id.Name)
			}
		}
	}
	var listed []string
	for _, zero := range deepCopied {
		listed = append(listed, reflect.TypeOf(zero).Elem().Name())
	}
	sort.Strings(withCopy)
	sort.Strings(listed)
	if len(withCopy) == 0 || !slices.Equal(withCopy, listed) {
		t.Errorf("types with DeepCopyInto: %v; deepCopied lists %v", withCopy, listed)
	}
}
