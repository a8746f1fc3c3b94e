// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

func slice(node string, gpus int) *resourceapi.ResourceSlice {
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpufrac"},
		Spec: resourceapi.ResourceSliceSpec{Driver: v1alpha1.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}},
	}
	for i := range gpus {
		s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{Name: "gpu-" + string(rune('0'+i)),
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("141Gi")}}})
	}
	return s
}

// claim is a claim for memory ("" for a whole GPU), allocated on
// node/device when node is set.
func claim(name, memory, node, device string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"}}
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev"}}
	if memory != "" {
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	c.Spec.Devices.Requests = []resourceapi.DeviceRequest{req}
	if node != "" {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: v1alpha1.DriverName, Pool: node, Device: device}
		if memory != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}
		}
		c.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{r}},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
				{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}},
		}
	}
	return c
}

func podWith(name, claimName string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("t")}}},
		Status:     v1.PodStatus{ResourceClaimStatuses: []v1.PodResourceClaimStatus{{Name: "gpu", ResourceClaimName: ptr.To(claimName)}}},
	}
}

// TestPrioritize drives the HTTP verb as kube-scheduler does
// (nodeCacheCapable: node names only) against informers fed by a fake
// API server.
func TestPrioritize(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		slice("node-a", 2), slice("node-b", 2), slice("node-c", 2),
		// node-b: gpu-0 holds 100Gi of fractions (41Gi free).
		claim("b1", "60Gi", "node-b", "gpu-0"), claim("b2", "40Gi", "node-b", "gpu-0"),
		// node-c: a whole GPU only.
		claim("c1", "", "node-c", "gpu-0"),
		// The incoming pods' claims, not allocated yet.
		claim("want-24", "24Gi", "", ""), claim("want-48", "48Gi", "", ""), claim("want-whole", "", "", ""),
	)
	factory := informers.NewSharedInformerFactory(client, 0)
	ext, err := New(factory, client)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), ext.Synced) {
		t.Fatal("informers did not sync")
	}
	srv := httptest.NewServer(ext.Handler())
	defer srv.Close()
	post := func(t *testing.T, body []byte) (int, extenderv1.HostPriorityList) {
		t.Helper()
		resp, err := http.Post(srv.URL+PathPrioritize, "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		var out extenderv1.HostPriorityList
		if resp.StatusCode == http.StatusOK {
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, out
	}
	nodes := []string{"node-c", "node-b", "node-a"}
	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		want map[string]int64
	}{
		{"24Gi fits node-b's shared GPU; node-a is the designated empty node (node-c's whole GPU is no fraction)",
			podWith("p", "want-24"), map[string]int64{"node-b": 10, "node-a": 1, "node-c": 0}},
		{"48Gi does not fit: node-b ranks by its one GPU in use",
			podWith("p", "want-48"), map[string]int64{"node-b": 2, "node-a": 1, "node-c": 0}},
		{"a whole-GPU pod gets no preference", podWith("p", "want-whole"), map[string]int64{"node-b": 0, "node-a": 0, "node-c": 0}},
		{"a claim that does not exist gives no preference", podWith("p", "missing"), map[string]int64{"node-b": 0, "node-a": 0, "node-c": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: tc.pod, NodeNames: &nodes})
			status, out := post(t, body)
			if status != http.StatusOK {
				t.Fatalf("status %d", status)
			}
			got := map[string]int64{}
			for _, h := range out {
				got[h.Host] = h.Score
			}
			for host, want := range tc.want {
				if got[host] != want {
					t.Errorf("%s scored %d, want %d (all: %v)", host, got[host], want, got)
				}
			}
		})
	}

	t.Run("a claim created after the cache synced is read from the API server", func(t *testing.T) {
		late := claim("late", "24Gi", "", "")
		// Added straight to the fake's tracker; the informer may or may not
		// have seen it, and either way the answer must be the same.
		if _, err := client.ResourceV1().ResourceClaims("ns").Create(ctx, late, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(extenderv1.ExtenderArgs{Pod: podWith("p", "late"), NodeNames: &nodes})
		_, out := post(t, body)
		for _, h := range out {
			if h.Host == "node-b" && h.Score != ScoreSharedFits {
				t.Errorf("node-b scored %d, want %d", h.Score, ScoreSharedFits)
			}
		}
	})

	t.Run("bad requests are refused by field", func(t *testing.T) {
		for body, want := range map[string]string{
			`{"nodenames": ["a"]}`: "ExtenderArgs.pod: missing",
			`not json`:             "decoding ExtenderArgs",
		} {
			resp, err := http.Post(srv.URL+PathPrioritize, "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			msg := new(bytes.Buffer)
			_, _ = msg.ReadFrom(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(msg.String(), want) {
				t.Errorf("%s: status %d %q, want 400 with %q", body, resp.StatusCode, msg, want)
			}
		}
		resp, err := http.Get(srv.URL + PathPrioritize)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("GET: status %d, want 405", resp.StatusCode)
		}
	})
}
