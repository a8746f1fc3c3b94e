// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestUnhealthyGPUIsTaintedAndAvoided marks a simulated GPU unhealthy (an
// XID, through the simulated node's health file): the plugin taints it on
// the real API server, the scheduler places new claims elsewhere while the
// claim already there keeps running, and clearing the fault lets the GPU
// take claims again.
func TestUnhealthyGPUIsTaintedAndAvoided(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("health", "")
	e.createTemplate(claimTemplate("share-40g", class, "40Gi", 1, ""))

	e.createPod("before", "share-40g", node.Name)
	before := e.waitRunning("before")
	sick := e.claimOf(before).Status.Allocation.Devices.Results[0].Device
	other := "gpu-0"
	if sick == "gpu-0" {
		other = "gpu-1"
	}
	healthFile := filepath.Join(node.PluginDataDir, "simulated-health.json")
	uuid := stringAttr(e.device(node.Name, sick), "uuid")
	if err := os.WriteFile(healthFile, []byte(`{"`+uuid+`": "XID 79"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.poll("the taint on "+sick, func() (bool, error) {
		d := e.device(node.Name, sick)
		return len(d.Taints) == 1 && d.Taints[0].Key == "gpufrac.dev/unhealthy" && d.Taints[0].Value == "XID-79", nil
	})

	// Three 40Gi shares fill the healthy GPU; the fourth has only the
	// tainted one left and stays Pending.
	for _, p := range []string{"a", "b", "c"} {
		e.createPod(p, "share-40g", node.Name)
		if got := e.claimOf(e.waitRunning(p)).Status.Allocation.Devices.Results[0].Device; got != other {
			t.Errorf("pod %s landed on %s, want the healthy %s", p, got, other)
		}
	}
	e.createPod("d", "share-40g", node.Name)
	e.poll("pod d to be unschedulable", func() (bool, error) {
		_, ok := unschedulable(e.pod("d"))
		return ok, nil
	})
	if !running(e.pod("before")) {
		t.Error("the pod on the tainted GPU was disturbed; NoSchedule must leave it running")
	}

	if err := os.WriteFile(healthFile, []byte(`{}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := e.claimOf(e.waitRunning("d")).Status.Allocation.Devices.Results[0].Device; got != sick {
		t.Errorf("after recovery pod d landed on %s, want %s", got, sick)
	}
}
