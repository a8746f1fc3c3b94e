// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package manifestcheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// FuzzCheck: whatever a claim's name, memory request and memoryLimit, the
// check neither panics nor prints a raw control character or an unbounded
// line, and a request or limit outside (0, largest GPU] never passes.
func FuzzCheck(f *testing.F) {
	f.Add("c", "10Gi", "20Gi")
	f.Add("c", "141Gi", "141Gi")
	f.Add("c", "9223372036854775807", "9223372036854775807")
	f.Add("c", "9223372036854775808", "-9223372036854775808")
	f.Add("c", "8Ei", "1e30")
	f.Add("c", "-1", "0")
	f.Add("c", "1m", "141Gi")
	f.Add("evil\x1b[2J\u202e", "10Gi", strings.Repeat("9", 1000))
	f.Add("c", "1E-999999999", "1e999999999")
	f.Add("c", "1e-31", "1e31")
	largest := resource.MustParse("141Gi")
	opts := Options{GPUMemorySizes: []resource.Quantity{resource.MustParse("80Gi"), largest}}
	f.Fuzz(func(t *testing.T, name, memory, limit string) {
		quote := func(s string) string { b, _ := json.Marshal(s); return string(b) }
		doc := fmt.Sprintf(`{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim","metadata":{"name":%s},`+
			`"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpufrac.dev","capacity":{"requests":{"memory":%s}}}}],`+
			`"config":[{"opaque":{"driver":"gpufrac.dev","parameters":{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":%s}}}]}}}`,
			quote(name), quote(memory), quote(limit))
		results := CheckWith(opts, Input{Name: "fuzz", Data: []byte(doc)})
		failed := false
		for _, r := range results {
			failed = failed || r.Failed()
			for _, line := range r.Lines() {
				if len(line) > MaxLineBytes+32 { // the cut and its count
					t.Fatalf("a line of %d bytes", len(line))
				}
				if strings.ContainsAny(line, "\x1b\a\r\n\u009b\u202e") {
					t.Fatalf("a raw control character: %q", line)
				}
			}
		}
		outside := func(s string) bool {
			q, err := v1alpha1.ParseQuantity(s) // resource.ParseQuantity("1E-999999999") takes minutes
			return err == nil && (q.Sign() <= 0 || q.Cmp(largest) > 0)
		}
		if !failed && (outside(memory) || outside(limit)) {
			t.Fatalf("memory %q, memoryLimit %q passed", memory, limit)
		}
	})
}
