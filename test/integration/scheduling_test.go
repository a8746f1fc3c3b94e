// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
)

// TestResourceSlicesAcceptedByAPIServer: the slices the plugin publishes
// reach the real API server whole (no field dropped by validation or a
// disabled feature such as consumable capacity).
func TestResourceSlicesAcceptedByAPIServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const gpus = "h200x2"
	node := e.node(gpus)

	stored := e.slices(node.Name)
	want := printSlices(t, node.Name, gpus)
	if len(stored) != len(want) {
		t.Fatalf("API server has %d slices for node %s, the plugin means to publish %d", len(stored), node.Name, len(want))
	}
	var devices []resourceapi.Device
	for _, s := range stored {
		if s.Spec.Driver != driver || s.Spec.Pool.Name != node.Name || s.Spec.NodeName == nil || *s.Spec.NodeName != node.Name {
			t.Errorf("slice %s: driver %q pool %q node %v, want %s, %s, %s", s.Name, s.Spec.Driver, s.Spec.Pool.Name, s.Spec.NodeName, driver, node.Name, node.Name)
		}
		devices = append(devices, s.Spec.Devices...)
	}
	var wantDevices []resourceapi.Device
	for _, s := range want {
		wantDevices = append(wantDevices, s.Spec.Devices...)
	}
	if !apiequality.Semantic.DeepEqual(devices, wantDevices) {
		t.Errorf("the API server stored other devices than the plugin publishes:\nstored: %+v\nwant:   %+v", devices, wantDevices)
	}
	if len(devices) != 2 {
		t.Fatalf("%d devices, want 2 (one per GPU)", len(devices))
	}
	for _, d := range devices {
		if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
			t.Errorf("device %s: allowMultipleAllocations not stored as true", d.Name)
		}
		mem, ok := d.Capacity["memory"]
		if !ok || mem.RequestPolicy == nil || mem.RequestPolicy.ValidRange == nil {
			t.Errorf("device %s: memory capacity or its request policy missing: %+v", d.Name, d.Capacity)
		}
		// An H200's (about 141Gi), less what a node that runs MPS daemons
		// keeps back for the server's context.
		var reserve int64
		if a, ok := d.Attributes["mpsServerReserveMiB"]; ok && a.IntValue != nil {
			reserve = *a.IntValue << 20
		}
		if offered, h200 := mem.Value, resource.MustParse("140Gi"); offered.Value()+reserve < h200.Value() {
			t.Errorf("device %s: memory %s with a server reserve of %d MiB, want an H200's (about 141Gi) less the reserve", d.Name, mem.Value.String(), reserve>>20)
		}
		if stringAttr(d, "uuid") == "" {
			t.Errorf("device %s has no uuid attribute", d.Name)
		}
	}
}

// TestDeviceClassCELSelectors: DeviceClasses select devices by the memory
// capacity and by attributes, as the scheduler evaluates them.
func TestDeviceClassCELSelectors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h100x1,h200x1")

	big := e.classFor("big", `device.capacity["gpufrac.dev"].memory.compareTo(quantity("100Gi")) >= 0`)
	h100 := e.classFor("h100", `device.attributes["gpufrac.dev"].productName.contains("H100")`)
	none := e.classFor("none", `device.capacity["gpufrac.dev"].memory.compareTo(quantity("100Gi")) >= 0 && device.attributes["gpufrac.dev"].productName.contains("H100")`)
	for _, c := range []string{big, h100, none} {
		e.createTemplate(claimTemplate(c, c, "10Gi", 1, ""))
		e.createPod(c, c, node.Name)
	}

	check := func(pod, wantProduct string, wantMin resource.Quantity) {
		t.Helper()
		e.poll("pod "+pod+" to be scheduled", func() (bool, error) { return e.pod(pod).Spec.NodeName != "", nil })
		claim := e.claimOf(e.pod(pod))
		e.poll("the allocation of "+claim.Name, func() (bool, error) {
			claim = e.claimOf(e.pod(pod))
			return claim.Status.Allocation != nil, nil
		})
		results := claim.Status.Allocation.Devices.Results
		if len(results) != 1 {
			t.Fatalf("pod %s: %d allocated devices, want 1", pod, len(results))
		}
		dev := e.device(node.Name, results[0].Device)
		if product := stringAttr(dev, "productName"); !strings.Contains(product, wantProduct) {
			t.Errorf("pod %s got %s (%s), want a %s", pod, dev.Name, product, wantProduct)
		}
		if mem := dev.Capacity["memory"].Value; mem.Cmp(wantMin) < 0 {
			t.Errorf("pod %s got %s with %s, want at least %s", pod, dev.Name, mem.String(), wantMin.String())
		}
	}
	check(big, "H200", resource.MustParse("100Gi"))
	check(h100, "H100", resource.MustParse("0"))

	e.poll("pod "+none+" to be unschedulable", func() (bool, error) {
		msg, ok := unschedulable(e.pod(none))
		if ok && !strings.Contains(msg, "cannot allocate all claims") {
			return false, fmt.Errorf("unschedulable for another reason: %s", msg)
		}
		return ok, nil
	})
}

// TestSevenPodsOfFortyGiOnTwoH200: the scheduler packs three 40Gi shares
// per 141Gi GPU, never a fourth; the seventh pod stays Pending with the
// scheduler's reason, and takes the place of a deleted pod.
func TestSevenPodsOfFortyGiOnTwoH200(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("all", "")
	e.createTemplate(claimTemplate("share-40g", class, "40Gi", 1, ""))
	for i := range 7 {
		e.createPod(fmt.Sprintf("p%d", i), "share-40g", node.Name)
	}

	var pending string
	e.poll("six pods scheduled and one unschedulable", func() (bool, error) {
		scheduled, unsched := 0, []string{}
		for _, p := range e.pods() {
			if p.Spec.NodeName != "" {
				scheduled++
			} else if msg, ok := unschedulable(&p); ok {
				if !strings.Contains(msg, "cannot allocate all claims") {
					return false, fmt.Errorf("pod %s unschedulable for another reason: %s", p.Name, msg)
				}
				unsched = append(unsched, p.Name)
			}
		}
		if scheduled > 6 {
			t.Fatalf("%d pods of 40Gi scheduled on 2 x 141Gi: the guarantee is over-committed", scheduled)
		}
		if scheduled == 6 && len(unsched) == 1 {
			pending = unsched[0]
			return true, nil
		}
		return false, fmt.Errorf("%d scheduled, unschedulable %v", scheduled, unsched)
	})

	perDevice := map[string]int{}
	shares := sets.New[string]()
	for _, p := range e.pods() {
		if p.Name == pending {
			continue
		}
		claim := e.claimOf(&p)
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("pod %s is bound but its claim %s has no single allocated device: %+v", p.Name, claim.Name, claim.Status.Allocation)
		}
		r := claim.Status.Allocation.Devices.Results[0]
		if r.Driver != driver || r.Pool != node.Name {
			t.Errorf("claim %s: allocated %s/%s, want driver %s pool %s", claim.Name, r.Driver, r.Pool, driver, node.Name)
		}
		if r.ShareID == nil {
			t.Errorf("claim %s: no shareID on a multi-allocatable device", claim.Name)
		} else {
			shares.Insert(string(*r.ShareID))
		}
		if got := r.ConsumedCapacity["memory"]; got.Cmp(resource.MustParse("40Gi")) != 0 {
			t.Errorf("claim %s: consumed memory %s, want 40Gi", claim.Name, got.String())
		}
		perDevice[r.Device]++
	}
	if len(perDevice) != 2 || shares.Len() != 6 {
		t.Errorf("shares per GPU %v with %d distinct share IDs, want 3 on each of 2 GPUs, 6 distinct", perDevice, shares.Len())
	}
	for dev, n := range perDevice {
		if n != 3 {
			t.Errorf("GPU %s holds %d shares of 40Gi, want 3", dev, n)
		}
	}

	// Freeing one share lets the pending pod in.
	var victim string
	for _, p := range e.pods() {
		if p.Name != pending {
			victim = p.Name
			break
		}
	}
	e.deletePod(victim)
	e.poll("pod "+pending+" to take the freed share", func() (bool, error) {
		return e.pod(pending).Spec.NodeName == node.Name, nil
	})
}
