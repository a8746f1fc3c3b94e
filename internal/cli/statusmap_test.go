// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// mapCluster is node-a with two 80Gi GPUs, gpu-0 (UUID GPU-0c) holding
// team/llm's 40Gi share (limit 60Gi), gpu-1 tainted.
func mapCluster() clientFunc {
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("80Gi")}}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpufrac.dev", NodeName: ptr.To("node-a"), Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0", Capacity: capacity,
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To("GPU-0c")}}}, {Name: "gpu-1", Capacity: capacity,
			Taints: []resourceapi.DeviceTaint{{Key: "gpufrac.dev/unhealthy", Value: "XID-79", Effect: "NoSchedule"}}}}}}
	data, _ := json.Marshal(map[string]string{"memoryLimit": "60Gi", "computeMode": "TimeSlicing"})
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "team", UID: "uid-llm"}, Status: resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpufrac.dev", Pool: "node-a", Device: "gpu-0", ShareID: ptr.To(types.UID("s1")),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("40Gi")}}}}},
		Devices: []resourceapi.AllocatedDeviceStatus{{Driver: "gpufrac.dev", Pool: "node-a", Device: "gpu-0", ShareID: ptr.To("s1"),
			Data: &runtime.RawExtension{Raw: data}}},
	}}
	client := fake.NewClientset(slice, claim)
	return func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) { return client, nil }
}

// `status -o map` reads the cluster as the table does and, piped (here a
// buffer), prints the plain map: no escape, 80 columns.
func TestStatusMapCommand(t *testing.T) {
	clientFor := mapCluster()
	var out bytes.Buffer
	cmd := newRootCommand(IOStreams{Out: &out, ErrOut: &out}, clientFor)
	cmd.SetArgs([]string{"status", "-o", "map"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	// 80 columns less 14 fixed, 5 for the names and 15 for the suffix
	// leave 46 cells of 80Gi: 40Gi guaranteed is 23; the 20Gi of burst
	// room up to the 60Gi limit and the 20Gi beyond it are 11.5 each, and
	// the tie's cell goes to the first.
	for _, want := range []string{
		"\n  gpu-0     80Gi |" + strings.Repeat("A", 23) + strings.Repeat("~", 12) + strings.Repeat(".", 11) + "| 40Gi free\n",
		"\n  gpu-1 !   80Gi |" + strings.Repeat(".", 46) + "| TAINTED XID-79\n",
		"\n  A    40Gi    60Gi  team/llm (gpu-0)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("map lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\x1b") {
		t.Errorf("piped map has an escape: %q", got)
	}
	for _, l := range strings.Split(got, "\n") {
		if n := len([]rune(l)); n > pipedMapWidth {
			t.Errorf("%d columns: %q", n, l)
		}
	}

	cmd = newRootCommand(IOStreams{Out: &out, ErrOut: &out}, clientFor)
	cmd.SetArgs([]string{"status", "-o", "yaml"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "map") {
		t.Errorf("-o yaml: %v, want a refusal naming map", err)
	}
}

// Piped, the map is never coloured and 80 columns wide, NO_COLOR or not.
func TestMapOptionsPiped(t *testing.T) {
	for _, noColor := range []string{"", "1"} {
		if o := mapOptions(&bytes.Buffer{}, noColor); o.Colour || o.Width != pipedMapWidth {
			t.Errorf("NO_COLOR=%q, a buffer: %+v", noColor, o)
		}
	}
}
