// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/cli/simulate"
)

func TestLoadWorkload(t *testing.T) {
	sizes := []resource.Quantity{resource.MustParse("141Gi")}
	data, err := os.ReadFile("testdata/fractions-16g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	w, err := loadWorkload(data, sizes)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.pods) != 40 || len(w.templates) != 1 || w.pods[0].Name != "frac-0" || w.pods[39].Name != "frac-39" {
		t.Fatalf("got %d pods (%s..), %d templates", len(w.pods), w.pods[0].Name, len(w.templates))
	}
	kaiPod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kai\n  annotations: {gpu-fraction: \"0.5\"}\nspec:\n  containers: [{name: main, image: x}]\n"
	w, err = loadWorkload([]byte(kaiPod), sizes)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.pods) != 1 || len(w.templates) != 1 || len(w.pods[0].Spec.ResourceClaims) != 1 {
		t.Fatalf("KAI pod not translated: %d pods, %d templates", len(w.pods), len(w.templates))
	}
	for _, tc := range []struct{ yaml, want string }{
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  resourceClaims: [{name: gpu, resourceClaimTemplateName: nope}]\n  containers: [{name: c, image: x}]\n", "ResourceClaimTemplate nope is not in the workload"},
		{"apiVersion: v1\nkind: Pod\nmetadata: {name: p, annotations: {gpufrac.dev/replicas: \"zero\"}}\nspec:\n  containers: [{name: c, image: x}]\n", `gpufrac.dev/replicas="zero" is not a positive number`},
		{"apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "kind Service is not one the benchmark applies"},
		{"apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: c}\n", "the workload has no pods"},
	} {
		if _, err := loadWorkload([]byte(tc.yaml), sizes); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("want an error containing %q, got %v", tc.want, err)
		}
	}
}

func TestTraceWorkload(t *testing.T) {
	gpu := resource.MustParse("141Gi")
	asks := simulate.Generate(200, 1, gpu)
	w, err := traceWorkload(asks)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.pods) != 200 || len(w.templates) != len(simulate.Mix) {
		t.Fatalf("%d pods, %d templates; want 200 and one per size of the mix (%d)", len(w.pods), len(w.templates), len(simulate.Mix))
	}
	for _, tmpl := range w.templates {
		req := tmpl.Spec.Spec.Devices.Requests[0].Exactly
		if (tmpl.Name == "whole-gpu") != (req.Capacity == nil) {
			t.Errorf("template %s: capacity %v; only whole-gpu names no memory", tmpl.Name, req.Capacity)
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name            string
		file            string
		trace           int
		packing, output string
		against         string // "" is the default, on
		rounds          int
		extenderDown    bool
		want            string // "" accepts
	}{
		{name: "trace", trace: 10, packing: "on", output: "json", rounds: 1},
		{name: "compare", trace: 10, packing: "compare", output: "table", rounds: 3},
		{name: "extender down", trace: 10, packing: "extender", output: "json", rounds: 1, extenderDown: true},
		{name: "neither -f nor -trace", packing: "on", output: "json", rounds: 1, want: "give either -f WORKLOAD.yaml or -trace N"},
		{name: "unknown mode", trace: 10, packing: "maybe", output: "json", rounds: 1, want: `-packing="maybe": want on, webhook, off, extender or compare`},
		{name: "webhook alone", trace: 10, packing: "webhook", output: "json", rounds: 1},
		{name: "compare against the webhook", trace: 10, packing: "compare", against: "webhook", output: "json", rounds: 2},
		{name: "compare against off", trace: 10, packing: "compare", against: "off", output: "json", rounds: 2, want: `-against="off": want on or webhook`},
		{name: "no rounds", trace: 10, packing: "compare", output: "json", rounds: 0, want: "-rounds=0: want at least 1"},
		{name: "down without extender", trace: 10, packing: "compare", output: "json", rounds: 1, extenderDown: true, want: "-extender-down goes with -packing=extender only"},
		{name: "unknown output", trace: 10, packing: "off", output: "yaml", rounds: 1, want: `-o "yaml"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			against := tc.against
			if against == "" {
				against = "on"
			}
			err := check(tc.file, tc.trace, tc.packing, against, tc.output, tc.rounds, tc.extenderDown)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error with %q", err, tc.want)
			}
		})
	}
}
