// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestPublishedMemoryLeavesRoomForTheServer: on a node that runs MPS
// daemons (every fraction there is an MPS client) each GPU's capacity is
// its memory less the server reserve, rounded down to the step, and the
// slice says the reserve; so claims that fill the capacity leave the
// server's context room. A node without MPS keeps none back; a reserve at
// or above a GPU's memory, or negative, is refused with the flag's name.
func TestPublishedMemoryLeavesRoomForTheServer(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	slicesWith := func(image string, reserveMiB int64) (map[string]int64, map[string]int64, error) {
		cfg := simNodeConfig(t, fake.NewClientset())
		cfg.MPS.Namespace, cfg.MPS.Image, cfg.MPS.ServerReserveMiB = "gpufrac-system", image, reserveMiB
		slices, err := plugin.Slices(ctx, cfg)
		if err != nil {
			return nil, nil, err
		}
		capacity, reserve := map[string]int64{}, map[string]int64{}
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				uuid := *d.Attributes["uuid"].StringValue
				q := d.Capacity["memory"].Value
				capacity[uuid] = q.Value()
				if a, ok := d.Attributes["mpsServerReserveMiB"]; ok {
					reserve[uuid] = *a.IntValue
				}
				if largest := d.Capacity["memory"].RequestPolicy.ValidRange.Max; largest.Value() != q.Value() {
					t.Errorf("%s: the largest request %s is not the capacity %s", uuid, largest.String(), q.String())
				}
			}
		}
		return capacity, reserve, nil
	}
	total := map[string]uint64{}
	for _, g := range simNodeGPUs(t) {
		total[g.UUID] = g.MemoryBytes
	}
	step := uint64(domain.MemoryStep.Value())
	capacity, reserve, err := slicesWith("gpufrac:test", domain.DefaultServerReserveMiB)
	if err != nil {
		t.Fatal(err)
	}
	if len(capacity) != 2 {
		t.Fatalf("%d devices, want 2", len(capacity))
	}
	for uuid, c := range capacity {
		want := (total[uuid] - domain.DefaultServerReserveMiB<<20) / step * step
		if uint64(c) != want || reserve[uuid] != domain.DefaultServerReserveMiB {
			t.Errorf("%s on an MPS node: capacity %d, reserve %d MiB; want %d (total %d less %d MiB, rounded down to the step) and the reserve named",
				uuid, c, reserve[uuid], want, total[uuid], domain.DefaultServerReserveMiB)
		}
		if uint64(c)+domain.DefaultServerReserveMiB<<20 > total[uuid] {
			t.Errorf("%s: claims filling the capacity leave less than the reserve for the server", uuid)
		}
	}
	// MPS off on the plugin: no daemons, nothing kept back.
	capacity, reserve, err = slicesWith("", domain.DefaultServerReserveMiB)
	if err != nil {
		t.Fatal(err)
	}
	for uuid, c := range capacity {
		if uint64(c) != total[uuid]/step*step || len(reserve) != 0 {
			t.Errorf("%s without MPS: capacity %d, reserves %v; want the whole GPU %d and no reserve", uuid, c, reserve, total[uuid]/step*step)
		}
	}
	for _, bad := range []int64{-1, int64(total[simNodeGPUs(t)[0].UUID] >> 20)} {
		if _, _, err := slicesWith("gpufrac:test", bad); err == nil || !strings.Contains(err.Error(), "--mps-server-reserve-mib") {
			t.Errorf("reserve %d MiB: %v, want it refused naming --mps-server-reserve-mib", bad, err)
		}
	}
}

// simNodeGPUs are the GPUs of simNodeConfig's node, as its driver knows them.
func simNodeGPUs(t *testing.T) []gpusim.DriverGPU {
	t.Helper()
	node, err := gpusim.NewNode("h200x2", nodeName, domain.EnforcementDMem)
	if err != nil {
		t.Fatal(err)
	}
	return node.Driver.GPUs
}
