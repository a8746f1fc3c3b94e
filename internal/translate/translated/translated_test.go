// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package translated_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// TestAllocatedFollowsTheRequestPolicy: up to the minimum, the minimum;
// above it, the step counted from the minimum; the figures both
// translations report.
func TestAllocatedFollowsTheRequestPolicy(t *testing.T) {
	minQ, step := resource.MustParse("1Gi"), resource.MustParse("256Mi")
	for in, want := range map[string]string{
		"100m": "1Gi", "512Mi": "1Gi", "1Gi": "1Gi", "1025Mi": "1280Mi",
		"3000Mi": "3Gi", "20000Mi": "20224Mi", "40779Mi": "40960Mi",
	} {
		got := translated.Allocated(resource.MustParse(in), minQ, step)
		if got.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("%s: %s, want %s", in, got.String(), want)
		}
	}
}

func TestPodClaimNameHashesOnlyWhatDoesNotFit(t *testing.T) {
	if got := translated.PodClaimName("gpufrac-", "main"); got != "gpufrac-main" {
		t.Errorf("short name: %q", got)
	}
	long := strings.Repeat("c", 63)
	got := translated.PodClaimName("gpufrac-", long)
	if len(got) > 63 || !strings.HasPrefix(got, "gpufrac-") || got != translated.PodClaimName("gpufrac-", long) {
		t.Errorf("long name: %q", got)
	}
}

func TestForContainerFindsInitAndAppContainers(t *testing.T) {
	pod := &corev1.Pod{Spec: corev1.PodSpec{
		InitContainers: []corev1.Container{{Name: "init"}},
		Containers:     []corev1.Container{{Name: "app"}},
	}}
	for _, name := range []string{"init", "app"} {
		translated.ForContainer(pod, name, func(c *corev1.Container) { c.Image = "seen" })
	}
	var order []string
	translated.EachContainer(pod, func(c *corev1.Container) {
		if c.Image != "seen" {
			t.Errorf("container %s not found by name", c.Name)
		}
		order = append(order, c.Name)
	})
	if strings.Join(order, ",") != "init,app" {
		t.Errorf("EachContainer order %v", order)
	}
}

func TestStripNVIDIAEnvKeepsTheRest(t *testing.T) {
	c := &corev1.Container{Name: "main", Env: []corev1.EnvVar{
		{Name: "A", Value: "1"}, {Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}, {Name: "NVIDIA_GPU_MEMORY_LIMIT", Value: "1"},
	}}
	warnings := translated.StripNVIDIAEnv(c)
	if len(warnings) != 2 || len(c.Env) != 1 || c.Env[0].Name != "A" {
		t.Errorf("env %v, warnings %q", c.Env, warnings)
	}
	if !strings.HasPrefix(warnings[0], "container main: removed NVIDIA_VISIBLE_DEVICES: ") {
		t.Errorf("warning %q", warnings[0])
	}
}
