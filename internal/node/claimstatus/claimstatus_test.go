// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func smPlan() *plan.Claim {
	return &plan.Claim{UID: "uid-1", Namespace: "ns", Name: "c", Devices: []plan.Device{{
		Request: "gpu", Pool: "n", Device: "gpu-2", ShareID: ptr.To(types.UID("s1")),
		GPU:            domain.GPU{UUID: "GPU-2"},
		SoftLimitBytes: 16 << 30, HardLimitBytes: 24 << 30, ComputeMode: v1alpha1.SMSharing,
		ActiveThreadPercentage: ptr.To[int32](40), Enforcement: domain.EnforcementDMem,
		MPS: mpslayout.For("/var/lib/kubelet/plugins/gpufrac.dev/mps", "GPU-2"),
	}}}
}

func TestDeviceStatusesSayWhatWasDone(t *testing.T) {
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	devs, err := claimstatus.DeviceStatuses(smPlan(), now)
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 1 {
		t.Fatalf("devices %+v", devs)
	}
	d := devs[0]
	if d.Driver != "gpufrac.dev" || d.Pool != "n" || d.Device != "gpu-2" || *d.ShareID != "s1" {
		t.Errorf("identity %s/%s/%s/%s", d.Driver, d.Pool, d.Device, *d.ShareID)
	}
	c := d.Conditions[0]
	if c.Type != "Ready" || c.Status != metav1.ConditionTrue || c.Reason != "Prepared" ||
		c.Message != "16Gi guaranteed, 24Gi limit enforced by dmem on GPU GPU-2, SMSharing" {
		t.Errorf("condition %s %s %s %q", c.Type, c.Status, c.Reason, c.Message)
	}
	var data domain.DeviceData
	if err := json.Unmarshal(d.Data.Raw, &data); err != nil {
		t.Fatal(err)
	}
	want := domain.DeviceData{UUID: "GPU-2", MemoryRequest: "16Gi", MemoryLimit: "24Gi", ComputeMode: "SMSharing",
		Enforcement: "dmem", MPSServer: smPlan().Devices[0].MPS.PipeDir, ActiveThreadPercentage: ptr.To[int32](40)}
	if data.UUID != want.UUID || data.MemoryRequest != want.MemoryRequest || data.MemoryLimit != want.MemoryLimit ||
		data.ComputeMode != want.ComputeMode || data.Enforcement != want.Enforcement || data.MPSServer != want.MPSServer ||
		*data.ActiveThreadPercentage != 40 {
		t.Errorf("data %+v, want %+v", data, want)
	}
	if cleared, _ := claimstatus.DeviceStatuses(nil, now); len(cleared) != 0 {
		t.Error("an unprepared claim has no entries of ours")
	}
}

// TestApplyKeepsOtherDriversAndChecksTheUID: only this driver's entries are
// replaced, and a claim recreated under the same name is left alone.
func TestApplyKeepsOtherDriversAndChecksTheUID(t *testing.T) {
	ctx := t.Context()
	other := resourceapi.AllocatedDeviceStatus{Driver: "net.example.com", Pool: "n", Device: "eth0"}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"},
		Status: resourceapi.ResourceClaimStatus{Devices: []resourceapi.AllocatedDeviceStatus{other}}}
	client := fake.NewClientset(claim)
	w := claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	get := func() []resourceapi.AllocatedDeviceStatus {
		c, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return c.Status.Devices
	}
	if err := w.Apply(ctx, "ns", "c", "uid-1", smPlan()); err != nil {
		t.Fatal(err)
	}
	if devs := get(); len(devs) != 2 || devs[0].Driver != "net.example.com" || devs[1].Driver != "gpufrac.dev" {
		t.Errorf("after prepare: %+v", devs)
	}
	if err := w.Apply(ctx, "ns", "c", "uid-other", nil); err != nil {
		t.Fatal(err)
	}
	if len(get()) != 2 {
		t.Error("a write for another claim of the same name changed this one")
	}
	if err := w.Apply(ctx, "ns", "c", "uid-1", nil); err != nil {
		t.Fatal(err)
	}
	if devs := get(); len(devs) != 1 || devs[0].Driver != "net.example.com" {
		t.Errorf("after unprepare: %+v, want only the other driver's entry", devs)
	}
}

func TestWriterRetriesUntilApplied(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"}}
	client := fake.NewClientset(claim)
	var failures atomic.Int32
	client.PrependReactor("update", "resourceclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) <= 2 {
			return true, nil, errors.New("apiserver unavailable")
		}
		return false, nil, nil
	})
	w := claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	go w.Run(ctx, 1)
	w.Prepared(smPlan())
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
		return err == nil && len(got.Status.Devices) == 1 && w.Pending() == 0, err
	})
	if err != nil {
		t.Fatalf("status never applied: %v", err)
	}
	if failures.Load() < 3 {
		t.Errorf("%d apply attempts, want the two failures retried", failures.Load())
	}
	// A claim deleted before its status was cleared: nothing to retry.
	if err := client.ResourceV1().ResourceClaims("ns").Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Unprepared("ns", "c", "uid-1")
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return w.Pending() == 0, nil
	})
	if err != nil {
		t.Errorf("a vanished claim keeps being retried: %v", err)
	}
}

// A dead MPS daemon shows on the claim as MPSServerReady=False beside
// Ready, and True again once the recreated daemon is ready.
func TestMPSServerCondition(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "uid-1"}})
	w := claimstatus.NewWriter(client, "gpufrac.dev/n", "n")
	go w.Run(ctx, 1)
	condition := func(want metav1.ConditionStatus) metav1.Condition {
		t.Helper()
		var got metav1.Condition
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			claim, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "c", metav1.GetOptions{})
			if err != nil || len(claim.Status.Devices) != 1 {
				return false, err
			}
			for _, c := range claim.Status.Devices[0].Conditions {
				if c.Type == claimstatus.ConditionMPSServerReady {
					got = c
				}
			}
			return got.Status == want && len(claim.Status.Devices[0].Conditions) == 2, nil
		})
		if err != nil {
			t.Fatalf("MPSServerReady never became %s (have %+v): %v", want, got, err)
		}
		return got
	}
	c := smPlan()
	w.Prepared(c)
	w.MPSServerState(c, domain.MPSServer{Reason: "DaemonRestarted", Message: "the MPS daemon of GPU GPU-2 is gone", Since: time.Now()})
	if got := condition(metav1.ConditionFalse); got.Reason != "DaemonRestarted" || got.Message != "the MPS daemon of GPU GPU-2 is gone" {
		t.Errorf("condition %+v", got)
	}
	w.MPSServerState(c, domain.MPSServer{Ready: true, Reason: "DaemonReady", Since: time.Now()})
	condition(metav1.ConditionTrue)
}
