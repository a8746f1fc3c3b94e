// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/cli/why"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/sim/catalog"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// whyCluster is one node of two H200, a 100Gi share held on each GPU by a
// pod in another namespace, and a Pending pod whose 80Gi claim (from a
// template, not created yet) fits nowhere.
func whyCluster(t *testing.T) []runtime.Object {
	inv, err := catalog.Inventory("h200x2", "node-a", domain.EnforcementDMem)
	if err != nil {
		t.Fatal(err)
	}
	res, err := resourceslices.DriverResources("node-a", inv)
	if err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpufrac.dev"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`}}}}}}
	for _, s := range resourceslices.Objects("gpufrac.dev", res) {
		objs = append(objs, s)
	}
	for i, dev := range []string{"gpu-0", "gpu-1"} {
		name := "held-" + dev
		objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "other", UID: types.UID("uid-" + name)},
			Status: resourceapi.ResourceClaimStatus{
				Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
					Request: "gpu", Driver: "gpufrac.dev", Pool: "node-a", Device: dev, ShareID: ptr.To(types.UID("s" + dev)),
					ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse([]string{"100Gi", "110Gi"}[i])}}}}},
				ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "user-" + dev, UID: "p"}},
			}})
	}
	objs = append(objs, &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: "team"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev",
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("80Gi")}}}}}}}}})
	objs = append(objs, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "too-big", Namespace: "team", UID: "pod-uid"},
		Spec:   v1.PodSpec{ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("big")}}},
		Status: v1.PodStatus{Phase: v1.PodPending}})
	return objs
}

func runWhy(t *testing.T, client kubernetes.Interface, args ...string) string {
	t.Helper()
	var out bytes.Buffer
	cmd := newRootCommand(IOStreams{Out: &out, ErrOut: &out}, func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) { return client, nil })
	cmd.SetArgs(append([]string{"why"}, args...))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("why %v: %v\n%s", args, err, out.String())
	}
	return out.String()
}

func TestWhyCommand(t *testing.T) {
	client := fake.NewClientset(whyCluster(t)...)
	got := runWhy(t, client, "too-big", "-n", "team")
	for _, want := range []string{
		"Pod team/too-big (Pending): the claims fit on no node, blocked by capacity: the 2 GPUs it may use have 72Gi free in all, less than 80Gi on one GPU",
		"NotEnoughMemory on 1 of 1 nodes",
		"NotEnoughMemory: team/too-big-gpu (from template big) gpu: the request needs 80Gi free guaranteed memory on one GPU; the largest free share here is 41Gi (gpu-0)",
		"a request of at most 41Gi (capacity.requests.memory of request gpu) fits now on node-a gpu-0",
		"gpu-0 on node-a fits it once other/user-gpu-0 leaves (100Gi freed)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Could not see") {
		t.Errorf("a user who may read everything was told something is not visible:\n%s", got)
	}

	var e why.Explanation
	if err := json.Unmarshal([]byte(runWhy(t, client, "too-big", "-n", "team", "-o", "json")), &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Nodes) != 1 || e.Nodes[0].Reasons[0].Code != why.NotEnoughMemory || len(e.Suggestions) != 2 {
		t.Errorf("json %+v", e)
	}
}

// The GPUs a pending request was weighed against show the MPS server
// reserve their slices state, in the text and in the JSON.
func TestWhyCommandShowsTheServerReserve(t *testing.T) {
	objs := whyCluster(t)
	for _, o := range objs {
		if s, ok := o.(*resourceapi.ResourceSlice); ok {
			for i := range s.Spec.Devices {
				s.Spec.Devices[i].Attributes["mpsServerReserveMiB"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(1024))}
			}
		}
	}
	client := fake.NewClientset(objs...)
	if got := runWhy(t, client, "too-big", "-n", "team"); !strings.Contains(got, "41Gi free of 141Gi (1Gi more kept for the MPS server)") {
		t.Errorf("why does not show the server reserve:\n%s", got)
	}
	var e why.Explanation
	if err := json.Unmarshal([]byte(runWhy(t, client, "too-big", "-n", "team", "-o", "json")), &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Nodes) != 1 || len(e.Nodes[0].GPUs) != 2 || e.Nodes[0].GPUs[0].ServerReserveBytes != 1<<30 {
		t.Errorf("json %+v", e.Nodes)
	}
}

// TestWhyCommandLimitedAccess: a user who may read only their namespace
// still gets an answer, told what it could not see; the memory other
// namespaces hold looks free to them, and the answer says that may be so.
func TestWhyCommandLimitedAccess(t *testing.T) {
	client := fake.NewClientset(whyCluster(t)...)
	forbid := func(action k8stesting.Action) (bool, runtime.Object, error) {
		if action.GetNamespace() == "" {
			return true, nil, apierrors.NewForbidden(action.GetResource().GroupResource(), "", nil)
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "resourceclaims", forbid)
	client.PrependReactor("list", "nodes", forbid)
	got := runWhy(t, client, "too-big", "-n", "team")
	for _, want := range []string{
		"Could not see (your access, or unreachable",
		"resourceclaims outside namespace team (cannot list them cluster-wide)",
		"nodes (cannot list)",
		// Without the other namespace's claims both GPUs look empty.
		"the claims fit now on [node-a]",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// TestWhyCommandClaim: an allocated claim named directly shows its share;
// the plugin pods that would give its usage are not found, and the output
// says so.
func TestWhyCommandClaim(t *testing.T) {
	client := fake.NewClientset(whyCluster(t)...)
	got := runWhy(t, client, "resourceclaim/held-gpu-1", "-n", "other")
	for _, want := range []string{
		"other/held-gpu-1: the claims are allocated; the node's plugin has not prepared every share yet",
		"other/held-gpu-1", "node-a", "gpu-1", "110Gi", "(not prepared)",
		"memory in use on node node-a (no running gpufrac-kubelet-plugin pod with a metrics port there)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	cmd := newRootCommand(IOStreams{Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}}, func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) { return client, nil })
	cmd.SetArgs([]string{"why"})
	if err := cmd.Execute(); err == nil {
		t.Error("why without an argument succeeded")
	}
	cmd.SetArgs([]string{"why", "deployment/x"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "want a pod name or resourceclaim/NAME") {
		t.Errorf("why deployment/x: %v", err)
	}
}

// metricsResponse answers a pod proxy GET with the plugin's metrics text.
type metricsResponse string

func (m metricsResponse) DoRaw(context.Context) ([]byte, error) { return []byte(m), nil }
func (m metricsResponse) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(m))), nil
}

// TestWhyCommandUsage: for an allocated, prepared claim why reads the
// memory in use from the /metrics of the gpufrac-kubelet-plugin pod on the
// claim's node, through the pod proxy on the pod's metrics port, and shows
// it against the request and the limit.
func TestWhyCommandUsage(t *testing.T) {
	objs := whyCluster(t)
	for _, o := range objs {
		c, ok := o.(*resourceapi.ResourceClaim)
		if !ok || c.Name != "held-gpu-0" {
			continue
		}
		data, _ := json.Marshal(map[string]string{"uuid": "GPU-X", "memoryRequest": "100Gi", "memoryLimit": "120Gi", "computeMode": "TimeSlicing", "enforcement": "dmem"})
		r := c.Status.Allocation.Devices.Results[0]
		c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: r.Driver, Pool: r.Pool, Device: r.Device,
			ShareID: ptr.To(string(*r.ShareID)), Data: &runtime.RawExtension{Raw: data}}}
	}
	objs = append(objs, &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-kubelet-plugin-abc", Namespace: "gpufrac",
		Labels: map[string]string{"app.kubernetes.io/name": "gpufrac", "app.kubernetes.io/component": "kubelet-plugin"}},
		Spec: v1.PodSpec{NodeName: "node-a", Containers: []v1.Container{{Name: "kubelet-plugin",
			Ports: []v1.ContainerPort{{Name: "metrics", ContainerPort: 8080}}}}},
		Status: v1.PodStatus{Phase: v1.PodRunning}})
	client := fake.NewClientset(objs...)
	var asked string
	client.PrependProxyReactor("pods", func(action k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		p := action.(k8stesting.ProxyGetAction)
		asked = p.GetNamespace() + "/" + p.GetName() + ":" + p.GetPort() + p.GetPath()
		return true, metricsResponse("# HELP x\n" + why.UsageMetric +
			`{claim_uid="uid-held-gpu-0",container="app",gpu_uuid="GPU-X",namespace="other",node="node-a",pod="user-gpu-0"} 1.1274289152e+11` + "\n"), nil
	})
	got := runWhy(t, client, "resourceclaim/held-gpu-0", "-n", "other")
	if asked != "gpufrac/gpufrac-kubelet-plugin-abc:8080/metrics" {
		t.Errorf("proxied to %q", asked)
	}
	if !strings.Contains(got, "user-gpu-0/app 105Gi (105% of request, 87% of limit)") || strings.Contains(got, "Could not see") {
		t.Errorf("output:\n%s", got)
	}
}
