// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	v1 "github.com/gpufrac/gpufrac/internal/node/checkpoint/api/v1"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestAdminAccessEntryRoundTrips: a monitoring device (adminAccess: no
// limits, no compute mode) survives the checkpoint, and an empty
// computeMode on a device without adminAccess is still an entry this
// release does not understand (quarantined, never taken for a share).
func TestAdminAccessEntryRoundTrips(t *testing.T) {
	mon := checkpoint.Entry{State: checkpoint.Completed, Plan: plan.Claim{UID: "m", Namespace: "ns", Name: "monitor",
		Devices: []plan.Device{{Request: "gpu", Pool: "n", Device: "gpu-0", GPU: domain.GPU{UUID: "GPU-0"},
			Enforcement: domain.EnforcementNone, AdminAccess: true}}}}
	raw, err := checkpoint.Encode("b", map[types.UID]checkpoint.Entry{"m": mon, "a": entry("a", checkpoint.Completed)})
	if err != nil {
		t.Fatal(err)
	}
	d, err := checkpoint.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := d.Claims["m"]
	if !ok || len(got.Plan.Devices) != 1 || !got.Plan.Devices[0].AdminAccess || got.Plan.Devices[0].ComputeMode != "" {
		t.Fatalf("monitor entry after decoding: %+v (quarantined: %+v)", got, d.Quarantined)
	}
	if d.Claims["a"].Plan.Devices[0].AdminAccess {
		t.Error("an ordinary share came back with adminAccess")
	}

	// The same entry with adminAccess removed, re-checksummed as a later
	// or damaged writer would: not understood, so quarantined.
	var f v1.File
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	data := strings.Replace(string(f.Data), `"adminAccess":true`, `"adminAccess":false`, 1)
	if data == string(f.Data) {
		t.Fatalf("no adminAccess in %s", f.Data)
	}
	sum := sha256.Sum256([]byte(data))
	f.Data, f.Checksum = json.RawMessage(data), "sha256:"+hex.EncodeToString(sum[:])
	forged, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	d2, err := checkpoint.Decode(forged)
	if err != nil {
		t.Fatal(err)
	}
	if q, ok := d2.Quarantined["m"]; !ok || !strings.Contains(q.Reason, "computeMode is empty") {
		t.Errorf("an entry with an empty computeMode and no adminAccess: quarantined %+v, claims %+v", d2.Quarantined, d2.Claims["m"])
	}
	if _, ok := d2.Claims["a"]; !ok {
		t.Error("the ordinary entry beside it was lost")
	}
}
