// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestCheckRecorded: a plan Compute made passes; one read back from a
// checkpoint that Compute could never have made is refused, naming why.
func TestCheckRecorded(t *testing.T) {
	inv := testInventory(domain.EnforcementDMem, "")
	opts := plan.Options{NodeName: node}
	good, err := plan.Compute(claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}}), inv, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.CheckRecorded(good, inv, opts); err != nil {
		t.Fatalf("a plan Compute made: %v", err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(c *plan.Claim)
		want   string
	}{
		{"200 TB guaranteed", func(c *plan.Claim) { c.Devices[0].SoftLimitBytes, c.Devices[0].HardLimitBytes = 200e12, 200e12 }, "guaranteed memory 200000000000000 bytes"},
		{"a negative guarantee", func(c *plan.Claim) { c.Devices[0].SoftLimitBytes = -1 }, "guaranteed memory -1 bytes"},
		{"a limit below the guarantee", func(c *plan.Claim) { c.Devices[0].HardLimitBytes = 1 }, "memory limit 1 bytes"},
		{"the record's GPU says it is larger", func(c *plan.Claim) {
			c.Devices[0].GPU.MemoryBytes = 1 << 50
			c.Devices[0].SoftLimitBytes, c.Devices[0].HardLimitBytes = 1<<49, 1<<49
		}, "want (0, 151397597184]"},
		{"a GPU the node lacks", func(c *plan.Claim) { c.Devices[0].GPU.UUID = "GPU-elsewhere" }, `GPU "GPU-elsewhere"`},
		{"another node's pool", func(c *plan.Claim) { c.Devices[0].Pool = "node-b" }, `pool "node-b" is not this node's`},
		{"a UID that climbs out", func(c *plan.Claim) { c.UID = "../x" }, "is not a UID"},
		{"a share ID that climbs out", func(c *plan.Claim) { c.Devices[0].ShareID = ptr.To(types.UID("../x")) }, "shareID"},
		{"no shares", func(c *plan.Claim) { c.Devices = nil }, "0 shares"},
		{"two shares of one GPU beyond it together", func(c *plan.Claim) {
			d := c.Devices[0]
			d.SoftLimitBytes, d.HardLimitBytes = 100<<30, 100<<30
			c.Devices = []plan.Device{d, d}
		}, "guarantee 214748364800 bytes together"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *good
			c.Devices = append([]plan.Device(nil), good.Devices...)
			tc.mutate(&c)
			err := plan.CheckRecorded(&c, inv, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckRecorded: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
