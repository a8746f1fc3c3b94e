// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package featureprobe checks at start that the API server keeps the DRA
// fields gpufrac writes. kube-apiserver drops the fields of a disabled
// feature gate silently on write (the resource registry's dropDisabledFields,
// k8s.io/kubernetes pkg/registry/resource), so a cluster older than
// Kubernetes 1.36, or one with DRAConsumableCapacity turned off, would
// accept gpufrac's slices and claims without their capacity and run every
// fraction as a whole GPU. The probe writes what gpufrac writes as a
// server-side dry run (nothing is stored), reads back the object the server
// returns, and names the server's version and every feature gate whose
// fields are missing.
//
// DRAExtendedResource is not probed: no gpufrac binary writes a
// DeviceClass (the chart does, and Helm has no read-back), and the fields
// gpufrac's binaries write belong to the two gates below.
package featureprobe

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// MinVersion is the oldest Kubernetes release whose defaults keep every
// field gpufrac writes (k8s.io/kubernetes v1.36.3 pkg/features: both gates
// below are beta and on by default from 1.36), and the oldest the
// compatibility tier tests (docs/design/testing.md).
const MinVersion = "1.36"

// Feature gates whose fields gpufrac writes.
const (
	// ConsumableCapacity: a device's allowMultipleAllocations and its
	// capacity's requestPolicy (the plugin's slices), a request's capacity
	// (the controller's claim templates).
	ConsumableCapacity = "DRAConsumableCapacity"
	// DeviceTaints: a device's taints (the plugin taints an unhealthy GPU).
	DeviceTaints = "DRADeviceTaints"
)

// probeTaintKey marks the probe's taint; the object is never stored.
const probeTaintKey = v1alpha1.DriverName + "/featureprobe"

// MissingError says which feature gates' fields the API server dropped.
type MissingError struct {
	// ServerVersion is the API server's gitVersion, or why it is unknown.
	ServerVersion string
	// Object is what was written ("ResourceSlice", "ResourceClaimTemplate").
	Object string
	// Gates are the feature gates whose fields were dropped, each with
	// the fields.
	Gates []DroppedGate
	// NotServed is set when the server has no resource.k8s.io/v1 API for
	// Object at all (Kubernetes before 1.34, or the API turned off).
	NotServed bool
}

// DroppedGate is one feature gate and the fields of it the server dropped.
type DroppedGate struct {
	Gate   string
	Fields []string
}

func (e *MissingError) Error() string {
	if e.NotServed {
		return fmt.Sprintf("the Kubernetes API server %s serves no resource.k8s.io/v1 %ss: gpufrac needs Kubernetes %s or later (the DRA API with %s and %s, on by default from %s)",
			e.ServerVersion, e.Object, MinVersion, ConsumableCapacity, DeviceTaints, MinVersion)
	}
	parts := make([]string, 0, len(e.Gates))
	names := make([]string, 0, len(e.Gates))
	for _, g := range e.Gates {
		parts = append(parts, fmt.Sprintf("%s (%s)", g.Gate, strings.Join(g.Fields, ", ")))
		names = append(names, g.Gate)
	}
	return fmt.Sprintf("the Kubernetes API server %s dropped fields of a %s that gpufrac writes, so the feature gates %s are off there: "+
		"gpufrac needs Kubernetes %s or later with them on (the default from %s; turn them on with kube-apiserver, kube-scheduler and kube-controller-manager's --feature-gates=%s)",
		e.ServerVersion, e.Object, strings.Join(parts, "; "), MinVersion, MinVersion, strings.Join(withTrue(names), ","))
}

func withTrue(gates []string) []string {
	out := make([]string, len(gates))
	for i, g := range gates {
		out[i] = g + "=true"
	}
	return out
}

// Plugin checks the fields of the slices the kubelet plugin of nodeName
// publishes, with a dry-run create of a one-device ResourceSlice of that
// node (what the chart's RBAC and its own-node admission policy allow the
// plugin).
func Plugin(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	slice := probeSlice(nodeName)
	got, err := client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return writeError(client, "ResourceSlice", err)
	}
	if gates := SliceDropped(got); len(gates) > 0 {
		return &MissingError{ServerVersion: serverVersion(client), Object: "ResourceSlice", Gates: gates}
	}
	return nil
}

// Controller checks the fields of the claim templates gpufrac-controller
// writes for KAI-annotated pods, with a dry-run create of one in namespace
// (the controller's own).
func Controller(ctx context.Context, client kubernetes.Interface, namespace string) error {
	tmpl := probeTemplate(namespace)
	got, err := client.ResourceV1().ResourceClaimTemplates(namespace).Create(ctx, tmpl, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return writeError(client, "ResourceClaimTemplate", err)
	}
	if gates := TemplateDropped(got); len(gates) > 0 {
		return &MissingError{ServerVersion: serverVersion(client), Object: "ResourceClaimTemplate", Gates: gates}
	}
	return nil
}

func writeError(client kubernetes.Interface, object string, err error) error {
	if apierrors.IsNotFound(err) {
		return &MissingError{ServerVersion: serverVersion(client), Object: object, NotServed: true}
	}
	return fmt.Errorf("checking that the Kubernetes API server %s keeps the DRA fields gpufrac writes (a dry-run create of a %s): %w",
		serverVersion(client), object, err)
}

func serverVersion(client kubernetes.Interface) string {
	v, err := client.Discovery().ServerVersion()
	if err != nil {
		return fmt.Sprintf("(version unknown: %v)", err)
	}
	return v.GitVersion
}

// probeSlice is a slice of nodeName with one device carrying every field
// the plugin's slices use (internal/core/resourceslices).
func probeSlice(nodeName string) *resourceapi.ResourceSlice {
	mem := resource.MustParse("1Gi")
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{GenerateName: nodeName + "-" + v1alpha1.DriverName + "-featureprobe-"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   v1alpha1.DriverName,
			NodeName: ptr.To(nodeName),
			Pool:     resourceapi.ResourcePool{Name: nodeName, ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{
				Name:                     "featureprobe",
				AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					domain.MemoryCapacity: {
						Value: mem,
						RequestPolicy: &resourceapi.CapacityRequestPolicy{
							Default:    ptr.To(mem.DeepCopy()),
							ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(mem.DeepCopy())},
						},
					},
				},
				Taints: []resourceapi.DeviceTaint{{Key: probeTaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule}},
			}},
		},
	}
}

// SliceDropped lists the gates whose fields probeSlice's device lost.
func SliceDropped(got *resourceapi.ResourceSlice) []DroppedGate {
	var dev resourceapi.Device
	if len(got.Spec.Devices) == 1 {
		dev = got.Spec.Devices[0]
	}
	var out []DroppedGate
	var fields []string
	if dev.AllowMultipleAllocations == nil {
		fields = append(fields, "spec.devices[].allowMultipleAllocations")
	}
	if c, ok := dev.Capacity[domain.MemoryCapacity]; !ok || c.RequestPolicy == nil {
		fields = append(fields, "spec.devices[].capacity[].requestPolicy")
	}
	if len(fields) > 0 {
		out = append(out, DroppedGate{Gate: ConsumableCapacity, Fields: fields})
	}
	if len(dev.Taints) == 0 {
		out = append(out, DroppedGate{Gate: DeviceTaints, Fields: []string{"spec.devices[].taints"}})
	}
	return out
}

// probeTemplate is a claim template whose request names a memory capacity,
// as the KAI translation's (internal/translate/kai).
func probeTemplate(namespace string) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpufrac-featureprobe-", Namespace: namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: v1alpha1.DriverName,
					Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
						domain.MemoryCapacity: resource.MustParse("1Gi"),
					}},
				},
			}}},
		}},
	}
}

// TemplateDropped lists the gates whose fields probeTemplate's request lost.
func TemplateDropped(got *resourceapi.ResourceClaimTemplate) []DroppedGate {
	reqs := got.Spec.Spec.Devices.Requests
	if len(reqs) == 1 && reqs[0].Exactly != nil && reqs[0].Exactly.Capacity != nil {
		if _, ok := reqs[0].Exactly.Capacity.Requests[domain.MemoryCapacity]; ok {
			return nil
		}
	}
	return []DroppedGate{{Gate: ConsumableCapacity, Fields: []string{"spec.spec.devices.requests[].exactly.capacity"}}}
}
