// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"bytes"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// WriteSlices writes one document per slice, each an object kubectl can
// apply: apiVersion and kind set, the slice's own fields kept.
func TestWriteSlicesWritesCompleteObjects(t *testing.T) {
	slices := []*resourceapi.ResourceSlice{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpufrac.dev-1"}, Spec: resourceapi.ResourceSliceSpec{Driver: "gpufrac.dev", NodeName: ptr.To("node-a")}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a-gpufrac.dev-2"}, Spec: resourceapi.ResourceSliceSpec{Driver: "gpufrac.dev"}},
	}
	var out bytes.Buffer
	if err := plugin.WriteSlices(&out, slices); err != nil {
		t.Fatal(err)
	}
	var docs [][]byte
	for doc, err := range yamldocs.All(out.Bytes()) {
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, doc)
	}
	if len(docs) != 2 || !bytes.HasPrefix(out.Bytes(), []byte("---\n")) || !bytes.HasPrefix(docs[1], []byte("apiVersion")) {
		t.Fatalf("want two documents each after ---, got:\n%s", out.String())
	}
	for i, doc := range docs {
		var got resourceapi.ResourceSlice
		if err := yaml.UnmarshalStrict(doc, &got); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		if got.APIVersion != "resource.k8s.io/v1" || got.Kind != "ResourceSlice" || got.Name != slices[i].Name || got.Spec.Driver != "gpufrac.dev" {
			t.Errorf("document %d = %s %s %q driver %q", i, got.APIVersion, got.Kind, got.Name, got.Spec.Driver)
		}
	}
}
