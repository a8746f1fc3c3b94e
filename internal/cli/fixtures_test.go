// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// The status tests' cluster pieces: slices, shares and claims as the
// plugin publishes and the scheduler and plugin record them, built one
// way so that each test states only what it is about.

// fakeCluster is a clientFunc over one fake API server holding objs.
func fakeCluster(objs ...runtime.Object) clientFunc {
	client := fake.NewClientset(objs...)
	return func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) { return client, nil }
}

// runCLI runs kubectl-gpufrac with args against clientFor and returns
// what it printed, its output and errors both.
func runCLI(clientFor clientFunc, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := newRootCommand(IOStreams{Out: &out, ErrOut: &out}, clientFor)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// memoryCapacity is a device capacity of size memory.
func memoryCapacity(size string) map[resourceapi.QualifiedName]resourceapi.DeviceCapacity {
	return map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse(size)}}
}

// gpuSlice is the gpufrac ResourceSlice name of node's pool (named after
// the node) holding devices.
func gpuSlice(name, node string, devices ...resourceapi.Device) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpufrac.dev", NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		Devices: devices}}
}

// share is the scheduler's allocation of shareID, a share of memory on
// device of node's pool, for the claim's request "gpu".
func share(node, device, shareID, memory string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpufrac.dev", Pool: node, Device: device,
		ShareID: ptr.To(types.UID(shareID)), ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
}

// allocatedClaim is team/name allocated results, reserved for pods (each
// pod's UID its name).
func allocatedClaim(name string, results []resourceapi.DeviceRequestAllocationResult, pods ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team"}, Status: resourceapi.ResourceClaimStatus{
		Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}}}
	for _, p := range pods {
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID(p)})
	}
	return c
}

// prepared records, as the plugin does once it prepared the claim, data
// in the device status of the claim's first share.
func prepared(c *resourceapi.ResourceClaim, data map[string]string) *resourceapi.ResourceClaim {
	raw, _ := json.Marshal(data)
	r := c.Status.Allocation.Devices.Results[0]
	st := resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device, Data: &runtime.RawExtension{Raw: raw}}
	if r.ShareID != nil { // a MIG instance, allocated whole, has none
		st.ShareID = ptr.To(string(*r.ShareID))
	}
	c.Status.Devices = append(c.Status.Devices, st)
	return c
}
