// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package featureprobe

import (
	"context"
	"errors"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// server answers the probe's dry-run creates as kube-apiserver does: the
// object as it would be stored, after drop (the fields of disabled gates
// removed, as the registry's dropDisabledFields does). It fails the test
// when a create is not a dry run: the probe must store nothing.
func server(t *testing.T, gitVersion string, drop func(runtime.Object)) *fake.Clientset {
	t.Helper()
	client := fake.NewClientset()
	client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: gitVersion}
	client.PrependReactor("create", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		create := action.(k8stesting.CreateActionImpl)
		if opts := create.GetCreateOptions(); len(opts.DryRun) != 1 || opts.DryRun[0] != metav1.DryRunAll {
			t.Errorf("the probe's create of %s is not a dry run: %+v", action.GetResource().Resource, opts)
		}
		obj := create.GetObject().DeepCopyObject()
		drop(obj)
		return true, obj, nil
	})
	return client
}

func dropConsumableCapacity(obj runtime.Object) {
	switch o := obj.(type) {
	case *resourceapi.ResourceSlice:
		for i := range o.Spec.Devices {
			o.Spec.Devices[i].AllowMultipleAllocations = nil
			for name, c := range o.Spec.Devices[i].Capacity {
				c.RequestPolicy = nil
				o.Spec.Devices[i].Capacity[name] = c
			}
		}
	case *resourceapi.ResourceClaimTemplate:
		for i := range o.Spec.Spec.Devices.Requests {
			if e := o.Spec.Spec.Devices.Requests[i].Exactly; e != nil {
				e.Capacity = nil
			}
		}
	}
}

func dropDeviceTaints(obj runtime.Object) {
	if o, ok := obj.(*resourceapi.ResourceSlice); ok {
		for i := range o.Spec.Devices {
			o.Spec.Devices[i].Taints = nil
		}
	}
}

func TestAServerThatKeepsEverythingPasses(t *testing.T) {
	client := server(t, "v1.36.3", func(runtime.Object) {})
	if err := Plugin(context.Background(), client, "node-a"); err != nil {
		t.Errorf("Plugin: %v", err)
	}
	if err := Controller(context.Background(), client, "gpufrac-system"); err != nil {
		t.Errorf("Controller: %v", err)
	}
}

func TestDroppedCapacityNamesTheGateAndTheVersion(t *testing.T) {
	client := server(t, "v1.35.4", dropConsumableCapacity)
	for name, err := range map[string]error{
		"plugin":     Plugin(context.Background(), client, "node-a"),
		"controller": Controller(context.Background(), client, "gpufrac-system"),
	} {
		var missing *MissingError
		if !errors.As(err, &missing) {
			t.Fatalf("%s: got %v, want a MissingError", name, err)
		}
		msg := err.Error()
		for _, want := range []string{"v1.35.4", "DRAConsumableCapacity", "Kubernetes 1.36 or later", "--feature-gates=DRAConsumableCapacity=true"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not say %q", name, msg, want)
			}
		}
		if strings.Contains(msg, DeviceTaints) {
			t.Errorf("%s: %q names DRADeviceTaints, whose fields were kept", name, msg)
		}
	}
}

func TestDroppedTaintsRefuseThePluginOnly(t *testing.T) {
	client := server(t, "v1.36.3", dropDeviceTaints)
	err := Plugin(context.Background(), client, "node-a")
	if err == nil || !strings.Contains(err.Error(), "DRADeviceTaints (spec.devices[].taints)") || strings.Contains(err.Error(), ConsumableCapacity) {
		t.Errorf("Plugin: got %v, want DRADeviceTaints alone named", err)
	}
	// The controller writes no taints.
	if err := Controller(context.Background(), client, "gpufrac-system"); err != nil {
		t.Errorf("Controller: %v", err)
	}
}

func TestBothGatesOffNamesBoth(t *testing.T) {
	client := server(t, "v1.35.0", func(o runtime.Object) { dropConsumableCapacity(o); dropDeviceTaints(o) })
	err := Plugin(context.Background(), client, "node-a")
	if err == nil || !strings.Contains(err.Error(), "DRAConsumableCapacity=true,DRADeviceTaints=true") {
		t.Errorf("got %v, want both gates named", err)
	}
}

// A server without resource.k8s.io/v1 answers 404 for the resource.
func TestAServerWithoutTheAPIIsNamed(t *testing.T) {
	client := fake.NewClientset()
	client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.33.1"}
	client.PrependReactor("create", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		gr := schema.GroupResource{Group: "resource.k8s.io", Resource: action.GetResource().Resource}
		return true, nil, apierrors.NewNotFound(gr, "")
	})
	err := Plugin(context.Background(), client, "node-a")
	if err == nil || !strings.Contains(err.Error(), "v1.33.1 serves no resource.k8s.io/v1 ResourceSlices") || !strings.Contains(err.Error(), "Kubernetes 1.36 or later") {
		t.Errorf("got %v", err)
	}
}

// Any other refusal (RBAC, admission) is passed on with what was tried.
func TestOtherErrorsAreWrapped(t *testing.T) {
	client := fake.NewClientset()
	client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: "v1.37.2"}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "resource.k8s.io", Resource: "resourceclaimtemplates"}, "", errors.New("no RBAC"))
	client.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, forbidden })
	err := Controller(context.Background(), client, "ns")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "dry-run create of a ResourceClaimTemplate") {
		t.Errorf("got %v", err)
	}
}
