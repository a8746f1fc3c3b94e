// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// mapCluster is node-a with two 80Gi GPUs, gpu-0 (UUID GPU-0c) holding
// team/llm's 40Gi share (limit 60Gi), gpu-1 tainted.
func mapCluster() clientFunc {
	gpu0 := resourceapi.Device{Name: "gpu-0", Capacity: memoryCapacity("80Gi"),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"uuid": {StringValue: ptr.To("GPU-0c")}}}
	gpu1 := resourceapi.Device{Name: "gpu-1", Capacity: memoryCapacity("80Gi"),
		Taints: []resourceapi.DeviceTaint{{Key: "gpufrac.dev/unhealthy", Value: "XID-79", Effect: "NoSchedule"}}}
	claim := prepared(allocatedClaim("llm", []resourceapi.DeviceRequestAllocationResult{share("node-a", "gpu-0", "s1", "40Gi")}),
		map[string]string{"memoryLimit": "60Gi", "computeMode": "TimeSlicing"})
	claim.UID = "uid-llm"
	return fakeCluster(gpuSlice("s", "node-a", gpu0, gpu1), claim)
}

// `status -o map` reads the cluster as the table does and, piped (here a
// buffer), prints the plain map: no escape, 80 columns.
func TestStatusMapCommand(t *testing.T) {
	clientFor := mapCluster()
	got, err := runCLI(clientFor, "status", "-o", "map")
	if err != nil {
		t.Fatal(err)
	}
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

	if _, err := runCLI(clientFor, "status", "-o", "yaml"); err == nil || !strings.Contains(err.Error(), "map") {
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
