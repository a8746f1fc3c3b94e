// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status_test

import (
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	status "github.com/gpufrac/gpufrac/internal/cli/status"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// status lists MIG instances beside fraction GPUs, with their profile and
// the claim that holds each one whole.
func TestStatusShowsMIGInstancesAndTheirHolder(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	srv, err := gpusim.New("h100x1,h100x1:mig=3g.40gb+1g.10gb", "n1")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := nvmldiscovery.Discover(ctx, srv, nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem})
	if err != nil {
		t.Fatal(err)
	}
	res, err := resourceslices.DriverResources("n1", inv)
	if err != nil {
		t.Fatal(err)
	}
	var slices []resourceapi.ResourceSlice
	for _, s := range resourceslices.Objects("gpufrac.dev", res) {
		slices = append(slices, *s)
	}
	claim := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: "ml"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "mig", Driver: "gpufrac.dev", Pool: "n1", Device: "gpu-1-mig-0-0"}}}}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "trainer-0"}}
	gpus := status.Build(slices, []resourceapi.ResourceClaim{claim}, "")
	var got []string
	for _, g := range gpus {
		got = append(got, g.Device+"="+g.Type)
		if g.Device != "gpu-1-mig-0-0" {
			continue
		}
		if g.Profile != "3g.40gb" || !strings.Contains(g.Model, "MIG 3g.40gb") || g.Memory != 40960<<20 {
			t.Errorf("instance %+v", g)
		}
		if len(g.Claims) != 1 || g.Claims[0].Name != "trainer" || g.Claims[0].Invalid != "" || g.Claims[0].Request != g.Memory || g.Claims[0].Pods[0] != "trainer-0" {
			t.Errorf("holder %+v", g.Claims)
		}
	}
	if strings.Join(got, ",") != "gpu-0=gpu,gpu-1-mig-0-0=mig,gpu-1-mig-1-0=mig" {
		t.Errorf("devices %v", got)
	}
}
