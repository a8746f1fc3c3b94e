// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// withAttrs sets int attributes on every device of s.
func withAttrs(s *resourceapi.ResourceSlice, attrs map[string]int64) *resourceapi.ResourceSlice {
	for i := range s.Spec.Devices {
		for k, v := range attrs {
			s.Spec.Devices[i].Attributes[resourceapi.QualifiedName(k)] = resourceapi.DeviceAttribute{IntValue: ptr.To(v)}
		}
	}
	return s
}

// TestSameModelWithAndWithoutMPSDaemons: a node that runs MPS daemons
// offers each GPU its total less the server's reserve (1Gi by default), so
// two nodes of one model publish capacities 1Gi apart. They agree on the
// GPU (memoryTotalMiB, DESIGN.md "What a slice's memory means"), so
// neither is ignored: both capacities are sizes, each with the total KAI
// translation computes from. Slices written before memoryTotalMiB agree
// through capacity plus mpsServerReserveMiB, to the 256Mi step; a total
// that differs is still ignored, and so is a capacity above its total.
func TestSameModelWithAndWithoutMPSDaemons(t *testing.T) {
	const h100 = "NVIDIA H100 80GB HBM3"
	plain := func(node string) *resourceapi.ResourceSlice {
		return withAttrs(gpuSlice(node, h100, "81408Mi", 8), map[string]int64{"memoryTotalMiB": 81559})
	}
	daemons := func(node string) *resourceapi.ResourceSlice {
		return withAttrs(gpuSlice(node, h100, "80384Mi", 8), map[string]int64{"memoryTotalMiB": 81559, "mpsServerReserveMiB": 1024})
	}
	for _, tc := range []struct {
		name    string
		slices  []*resourceapi.ResourceSlice
		want    string // sizes with their totals
		ignored int
	}{
		{"one node with daemons, two without: nothing ignored",
			[]*resourceapi.ResourceSlice{plain("n1"), plain("n2"), daemons("n3")},
			"[80384Mi=81559 81408Mi=81559]", 0},
		{"older slices, no memoryTotalMiB: capacity plus the reserve agree to the step",
			[]*resourceapi.ResourceSlice{gpuSlice("n1", h100, "81408Mi", 8), withAttrs(gpuSlice("n2", h100, "80384Mi", 8), map[string]int64{"mpsServerReserveMiB": 1024})},
			"[80384Mi=81408 81408Mi=81408]", 0},
		{"older and newer slices of one model agree to the step",
			[]*resourceapi.ResourceSlice{gpuSlice("n1", h100, "81408Mi", 8), daemons("n2"), plain("n3")},
			"[80384Mi=81559 81408Mi=81559]", 0},
		{"a node whose total differs is ignored, whatever its capacity",
			[]*resourceapi.ResourceSlice{plain("n1"), plain("n2"), withAttrs(gpuSlice("evil", h100, "80384Mi", 1), map[string]int64{"memoryTotalMiB": 1 << 20})},
			"[81408Mi=81559]", 1},
		{"a capacity above its own total is ignored",
			[]*resourceapi.ResourceSlice{plain("n1"), withAttrs(gpuSlice("evil", h100, "141Gi", 1), map[string]int64{"memoryTotalMiB": 81559})},
			"[81408Mi=81559]", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gpus, ignored := admission.ConsistentGPUs(tc.slices)
			var got []string
			for _, g := range gpus {
				got = append(got, fmt.Sprintf("%s=%d", g.Capacity.String(), g.TotalMiB))
			}
			if fmt.Sprint(got) != tc.want {
				t.Errorf("sizes %v, want %s", got, tc.want)
			}
			if len(ignored) != tc.ignored {
				t.Errorf("%d ignored, want %d: %+v", len(ignored), tc.ignored, ignored)
			}
			for _, i := range ignored {
				if *i.Slice.Spec.NodeName != "evil" {
					t.Errorf("ignored %s/%s, want only evil's", i.Slice.Name, i.Device)
				}
			}
			sizes, _ := admission.ConsistentGPUSizes(tc.slices)
			if len(sizes) != len(gpus) {
				t.Errorf("ConsistentGPUSizes %v disagrees with ConsistentGPUs %v", sizes, got)
			}
		})
	}
}

// TestWebhookComputesKAIFromMemoryTotalMiB: the webhook reads each GPU's
// total from the slices (memoryTotalMiB), not from its capacity, so a
// gpu-fraction gets KAI's binder's figure on the total (81559 MiB x 0.34
// = 27730 MiB) rounded up to the step on every capacity of the model, and
// records the totals on the pod for the controller's recomputation.
func TestWebhookComputesKAIFromMemoryTotalMiB(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	const h100 = "NVIDIA H100 80GB HBM3"
	client := fake.NewClientset()
	for _, s := range []*resourceapi.ResourceSlice{
		withAttrs(gpuSlice("n1", h100, "81408Mi", 8), map[string]int64{"memoryTotalMiB": 81559}),
		withAttrs(gpuSlice("n2", h100, "80384Mi", 8), map[string]int64{"memoryTotalMiB": 81559, "mpsServerReserveMiB": 1024}),
	} {
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster := admission.NewInformerCluster(factory)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer cancel()
	if err := cluster.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer((&admission.Server{Cluster: cluster}).Handler())
	defer srv.Close()
	resp := review(t, srv, admission.PathMutatePods, "Pod", admissionv1.Create, kaiPod(map[string]string{"gpu-fraction": "0.335"}))
	var inputs string
	for _, o := range opsOf(t, resp) {
		if strings.Contains(o.Path, "kai-inputs") {
			inputs = string(o.Value)
		}
	}
	want := `"{\"gpuMemorySizes\":[\"80384Mi\",\"81408Mi\"],\"gpuMemoryTotalsMiB\":[81559,81559],\"memoryStep\":\"256Mi\"}"`
	if inputs != want {
		t.Fatalf("recorded inputs %s, want %s", inputs, want)
	}
	// The controller recomputes the template from what the pod records.
	pod := kaiPod(map[string]string{"gpu-fraction": "0.335"})
	pod.Namespace = "team"
	res, err := kai.Translate(pod, kai.Options{GPUMemorySizes: cluster.GPUMemorySizes(), GPUTotalsMiB: cluster.GPUTotalsMiB()})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := kai.TemplateFor(res.Pod, kai.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range tmpl.Spec.Spec.Devices.Requests[0].FirstAvailable {
		if got := sub.Capacity.Requests["memory"]; got.String() != "27904Mi" {
			t.Errorf("%s asks %s, want 27904Mi (KAI's 27730 MiB rounded up to 256Mi)", sub.Name, got.String())
		}
	}
}
