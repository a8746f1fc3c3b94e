// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestHostileAllocations: status.allocation is whatever a client allowed
// to update claim status wrote; each value below is accepted by the API
// server, and each is refused naming the field, the value and the bound.
// The GPUs of testInventory have 141Gi, all offered.
func TestHostileAllocations(t *testing.T) {
	opts := plan.Options{NodeName: node, MPSRoot: "/mps"}
	dmem := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	const field0 = `status.allocation.devices.results[0].consumedCapacity[memory]: Invalid value: `
	const bound = `: must be a whole number of bytes in (0, 141Gi], the memory GPU gpu-0 offers on this node (151397597184 bytes)`
	one := func(memory string) *resourceapi.ResourceClaim {
		return claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: memory}})
	}
	many := func(n int, memory string) *resourceapi.ResourceClaim {
		rs := make([]result, n)
		for i := range rs {
			rs[i] = result{request: "gpu", device: "gpu-0", share: fmt.Sprintf("s%d", i), memory: memory}
		}
		return claim(rs)
	}
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{"negative", one("-1"), field0 + `"-1"` + bound},
		{"negative Gi", one("-40Gi"), field0 + `"-40Gi"` + bound},
		{"zero", one("0"), field0 + `"0"` + bound},
		{"a fraction of a byte", one("500m"), field0 + `"500m"` + bound},
		{"one byte over the GPU", one("151397597185"), field0 + `"151397597185"` + bound},
		{"above the GPU", one("200Gi"), field0 + `"200Gi"` + bound},
		{"int64 max", one("9223372036854775807"), field0 + `"9223372036854775807"` + bound},
		{"int64 min", one("-9223372036854775808"), field0 + `"-9223372036854775808"` + bound},
		{"past int64", one("9223372036854775808"), field0 + `"9223372036854775808"` + bound},
		{"1e30", one("1e30"), field0 + `"1e30"` + bound},
		{"-1e30", one("-1e30"), field0 + `"-1e30"` + bound},
		// A huge positive exponent parses at once (the API server stores
		// it); the plan must refuse it without formatting or comparing it
		// as a billion-digit number.
		{"1e999999999", one("1e999999999"), field0 + `"1e999999999"` + bound},
		{"shares of one GPU above it together", many(2, "100Gi"),
			`status.allocation.devices.results: Invalid value: "200Gi": the claim's shares of GPU gpu-0 consume this much together, more than the 141Gi it offers on this node`},
		{"limits of one GPU's shares above it together", claim([]result{
			{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
			{request: "gpu", device: "gpu-0", share: "s2", memory: "40Gi"},
		}, fromClaim(fc(`,"memoryLimit":"100Gi"`))),
			`status.allocation.devices.results: Invalid value: "200Gi": the memoryLimits of the claim's shares of GPU gpu-0 add up to this, more than its memory 141Gi; a container gets their sum`},
		{"a share ID that climbs out", func() *resourceapi.ResourceClaim {
			c := one("40Gi")
			c.Status.Allocation.Devices.Results[0].ShareID = ptr.To(types.UID("../../etc/x"))
			return c
		}(), `status.allocation.devices.results[0].shareID: Invalid value: "../../etc/x": must be a UID: lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters`},
		{"more shares than the node holds", many(283, "1Gi"),
			`status.allocation.devices.results: Invalid value: 283: 283 gpufrac shares in one claim, but this node's 2 GPUs hold at most 282 (shares of at least 1Gi)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := plan.Compute(tc.claim, dmem, opts)
			if err == nil {
				t.Fatalf("no error; plan %+v", got)
			}
			var invalid *plan.InvalidError
			if !errors.As(err, &invalid) {
				t.Errorf("error %T is not an InvalidError", err)
			}
			if want := "claim ns/llm cannot be prepared: " + tc.want; err.Error() != want {
				t.Errorf("error\n got: %s\nwant: %s", err.Error(), want)
			}
		})
	}
}

// TestAllocationBoundsAdmitTheEdges: the largest share a GPU offers, and
// the most shares the node holds, are prepared.
func TestAllocationBoundsAdmitTheEdges(t *testing.T) {
	opts := plan.Options{NodeName: node, MPSRoot: "/mps"}
	dmem := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	p, err := plan.Compute(claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "141Gi"}}), dmem, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Devices[0].SoftLimitBytes; got != 141*gib {
		t.Errorf("soft limit %d, want %d", got, 141*gib)
	}
	if got := plan.MaxShares(dmem); got != 282 {
		t.Errorf("MaxShares = %d, want 282 (2 GPUs of 141Gi in 1Gi shares)", got)
	}
	// 141 shares of 1Gi fill gpu-0 exactly.
	rs := make([]result, 141)
	for i := range rs {
		rs[i] = result{request: "gpu", device: "gpu-0", share: fmt.Sprintf("s%d", i), memory: "1Gi"}
	}
	if _, err := plan.Compute(claim(rs), dmem, opts); err != nil {
		t.Errorf("141 shares of 1Gi on a 141Gi GPU: %v", err)
	}
}

// TestInvalidErrorIsCapped: a claim with every share wrong gives an error
// of at most plan.MaxErrorBytes that says how much was left out.
func TestInvalidErrorIsCapped(t *testing.T) {
	opts := plan.Options{NodeName: node, MPSRoot: "/mps"}
	rs := make([]result, 280)
	for i := range rs {
		rs[i] = result{request: "gpu", device: fmt.Sprintf("gpu-%d", 1000+i), share: "s", memory: "1Gi"}
	}
	_, err := plan.Compute(claim(rs), testInventory(domain.EnforcementDMem, domain.MPSVersionV3), opts)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	if len(msg) > plan.MaxErrorBytes || !strings.Contains(msg, "more left out)") || !strings.Contains(msg, `results[0].device: Not found: "gpu-1000"`) {
		t.Errorf("%d bytes: %s", len(msg), msg)
	}
}
