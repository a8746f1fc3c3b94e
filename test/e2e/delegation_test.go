// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeWithoutDmemDelegationDoesNotAdvertiseDmem: the real node's
// plugin restarted on a node whose kubepods cgroup does not enable +dmem
// in cgroup.subtree_control (--simulate-dmem-undelegated=kubepods: the
// simulated driver's delegation setting, read through the seam that
// simulates cgroup v2 on this cgroup-v1 host; its NVML then refuses limits
// below kubepods as "not found") advertises what it can enforce (mps: it
// runs MPS), its slices say why, an Event on the Node names the level, and
// a TimeSlicing pod without a limit runs with no limit set for it.
func TestNodeWithoutDmemDelegationDoesNotAdvertiseDmem(t *testing.T) {
	e := newEnv(t)
	e.asNodeKind("--simulate-dmem-undelegated=kubepods")
	e.poll("the node's slices to advertise mps and say why", func() (bool, error) {
		slices, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
		if err != nil || len(slices.Items) == 0 {
			return false, nil
		}
		for _, s := range slices.Items {
			for _, d := range s.Spec.Devices {
				enf, note := d.Attributes["memoryEnforcement"].StringValue, d.Attributes["memoryEnforcementNote"].StringValue
				if enf == nil || *enf != "mps" || note == nil || !strings.Contains(*note, "cgroup.subtree_control of kubepods") {
					return false, nil
				}
			}
		}
		return true, nil
	})
	e.poll("an Event on the node naming the level without +dmem", func() (bool, error) {
		list, err := e.client.EventsV1().Events(metav1.NamespaceDefault).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, ev := range list.Items {
			if ev.Regarding.Kind == "Node" && ev.Regarding.Name == node.Name && ev.Reason == "GPUMemoryEnforcementReduced" &&
				strings.Contains(ev.Note, "cgroup.subtree_control of kubepods") {
				t.Logf("Event on node %s: %s", node.Name, ev.Note)
				return true, nil
			}
		}
		return false, nil
	})
	e.createTemplate("plain", e.classFor(6), "20Gi", "computeMode: TimeSlicing\n")
	e.createPod(probePod("plain", "plain"))
	pod := e.waitRunning("plain")
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	records, err := node.LimitRecords()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if strings.HasSuffix(r.Cgroup, id) {
			t.Errorf("limits were set for a container on a node without dmem delegation: %+v", r)
		}
	}
}
