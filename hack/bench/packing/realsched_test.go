// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

func TestRealschedOutcomes(t *testing.T) {
	gpu := resource.MustParse("141Gi")
	trace := simulate.Generate(10, 1, gpu)
	dir := t.TempDir()
	write := func(t *testing.T, text string) string {
		path := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Run("median run of each mode of this trace and cluster, in mode order", func(t *testing.T) {
		path := write(t, `8-100-off label line
{"packing":"on","nodes":64,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":3}
{"packing":"off","nodes":64,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":9}
{"packing":"off","nodes":64,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":6}
{"packing":"off","nodes":64,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":7}
{"packing":"on","nodes":8,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":2}
{"packing":"on","nodes":64,"gpus":"h200x8","placed":10,"total":99,"gpusUsed":2}
{"packing":"extender-down","nodes":64,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":9}
`)
		got, err := realschedOutcomes(path, trace, 64, gpu.Value())
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Strategy != "real: scheduler (median of 3)" || got[0].GPUsUsed != 7 || got[1].Strategy != "real: +packing" || got[1].GPUsUsed != 3 {
			t.Fatalf("got %+v", got)
		}
		if got[1].Utilisation <= got[0].Utilisation || got[1].AtRisk != 0 {
			t.Errorf("utilisation %v vs %v, at risk %d: fewer GPUs must mean higher utilisation, and none at risk", got[1].Utilisation, got[0].Utilisation, got[1].AtRisk)
		}
	})
	for name, tc := range map[string]struct{ text, want string }{
		"partly placed":   {`{"packing":"on","nodes":64,"gpus":"h200x8","placed":9,"total":10,"gpusUsed":3}`, "9 of 10 pods placed"},
		"no matching run": {`{"packing":"on","nodes":8,"gpus":"h200x8","placed":10,"total":10,"gpusUsed":3}`, "no run of 10 pods on 64 h200x8 nodes"},
		"bad json":        {`{"packing":`, ":1:"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := realschedOutcomes(write(t, tc.text), trace, 64, gpu.Value())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
