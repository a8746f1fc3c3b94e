// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/deployments"
)

// shippedClass creates a copy of the shipped DeviceClass name (its
// selectors, without its config) under a name of this test's namespace.
func (e *env) shippedClass(name string) string {
	e.t.Helper()
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, c := range classes {
		if c.Name == name {
			own := e.ns + "-" + strings.ReplaceAll(name, ".", "-")
			e.deviceClass(own, c.Spec.Selectors[0].CEL.Expression)
			return own
		}
	}
	e.t.Fatalf("no shipped DeviceClass %s", name)
	return ""
}

// TestFractionNeverLandsOnMIG: on a node with one fraction H100 and one
// H100 split into MIG instances (3g.40gb, 1g.10gb), the real scheduler
// places fractions of the shipped fraction class only on the whole GPU,
// even when it is full and a 3g.40gb instance has room for the request,
// and a claim of the shipped MIG class gets an instance whole, which the
// node's plugin prepares.
func TestFractionNeverLandsOnMIG(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h100x1,h100x1:mig=3g.40gb+1g.10gb")
	fraction := e.shippedClass("gpufrac.dev")
	mig := e.shippedClass("mig.gpufrac.dev")
	e.createTemplate(claimTemplate("share-30g", fraction, "30Gi", 1, ""))
	migTmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "mig-whole"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: mig, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}},
		}}},
	}
	e.createTemplate(migTmpl)
	for i := range 3 {
		e.createPod(fmt.Sprintf("f%d", i), "share-30g", node.Name)
	}
	e.createPod("m0", "mig-whole", node.Name)

	var pending string
	e.poll("two fractions and the MIG pod scheduled, one fraction unschedulable", func() (bool, error) {
		scheduled, unsched := 0, []string{}
		for _, p := range e.pods() {
			if p.Spec.NodeName != "" {
				scheduled++
			} else if _, ok := unschedulable(&p); ok {
				unsched = append(unsched, p.Name)
			}
		}
		if scheduled == 3 && len(unsched) == 1 {
			pending = unsched[0]
			return true, nil
		}
		return false, fmt.Errorf("%d scheduled, unschedulable %v", scheduled, unsched)
	})
	if !strings.HasPrefix(pending, "f") {
		t.Fatalf("pod %s is unschedulable, want the third fraction", pending)
	}
	for _, p := range e.pods() {
		if p.Name == pending {
			continue
		}
		claim := e.claimOf(&p)
		if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
			t.Fatalf("pod %s: claim %s allocation %+v", p.Name, claim.Name, claim.Status.Allocation)
		}
		r := claim.Status.Allocation.Devices.Results[0]
		switch {
		case strings.HasPrefix(p.Name, "f") && r.Device != "gpu-0":
			t.Errorf("fraction pod %s landed on %s, want gpu-0 (the only type gpu device)", p.Name, r.Device)
		case p.Name == "m0" && !strings.HasPrefix(r.Device, "gpu-1-mig-"):
			t.Errorf("MIG pod landed on %s, want a MIG instance of gpu-1", r.Device)
		case p.Name == "m0" && r.ShareID != nil:
			t.Errorf("MIG pod got share %s of a device that is allocated whole", *r.ShareID)
		}
	}
	e.waitRunning("m0")
}
