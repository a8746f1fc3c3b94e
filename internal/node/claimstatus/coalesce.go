// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus

import (
	"context"
	"encoding/json"
	"reflect"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// Every status write is a durable etcd write on the control plane, so the
// writer makes only those that change something (docs/reliability.md,
// "Claim status writes"):
//   - a write whose entries the claim already carries is skipped (a
//     re-prepare after a plugin restart, a repeated Prepare call);
//   - a clear waits SetClearDelay: a claim prepared again meanwhile with
//     the same content keeps its entries and needs no write, and a claim
//     deleted or deallocated by then needs none either (kube-apiserver
//     drops the status.devices entries of deallocated devices itself).

// DefaultClearDelay is the plugin's default for SetClearDelay.
const DefaultClearDelay = time.Second

// DefaultFlushTimeout bounds the writes still pending when Run ends.
const DefaultFlushTimeout = 5 * time.Second

// SetClearDelay holds back the clearing write of an unprepared claim by d
// (0: written as soon as a worker is free). Call it before Run.
func (w *Writer) SetClearDelay(d time.Duration) {
	w.clearDelay = d
}

// SetFlushTimeout bounds the writes still pending when Run ends (a clear
// waiting for its delay is written then, not dropped). Call it before Run.
func (w *Writer) SetFlushTimeout(d time.Duration) {
	w.flushTimeout = d
}

// flush writes, once each and within the flush timeout, what is still
// pending after the workers stopped: above all the clears held back by
// the delay, which a plugin stopping for good would otherwise never write.
func (w *Writer) flush(ctx context.Context) {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.flushTimeout)
	defer cancel()
	w.mu.Lock()
	pending := make(map[key]desired, len(w.desired))
	for k, d := range w.desired {
		pending[k] = d
	}
	w.mu.Unlock()
	for k, d := range pending {
		err := w.apply(ctx, k.namespace, k.name, k.uid, d)
		if err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Writing claim status at shutdown failed", "claim", klog.KRef(k.namespace, k.name), "claimUID", k.uid)
			continue
		}
		w.done(k, d)
	}
}

// keepTransitionTimes gives want's Ready conditions the transition time of
// the claim's current entry when their status did not change, as
// metav1.Condition documents (the last time the condition transitioned
// from one status to another); a re-prepare then writes nothing new.
func keepTransitionTimes(ours, want []resourceapi.AllocatedDeviceStatus) []resourceapi.AllocatedDeviceStatus {
	for i := range want {
		cur := findEntry(ours, want[i])
		if cur == nil {
			continue
		}
		for j := range want[i].Conditions {
			c := &want[i].Conditions[j]
			if c.Type != ConditionReady {
				continue
			}
			for _, old := range cur.Conditions {
				if old.Type == c.Type && old.Status == c.Status {
					c.LastTransitionTime = old.LastTransitionTime
				}
			}
		}
	}
	return want
}

func findEntry(entries []resourceapi.AllocatedDeviceStatus, e resourceapi.AllocatedDeviceStatus) *resourceapi.AllocatedDeviceStatus {
	for i := range entries {
		if entries[i].Driver == e.Driver && entries[i].Pool == e.Pool && entries[i].Device == e.Device &&
			reflect.DeepEqual(entries[i].ShareID, e.ShareID) {
			return &entries[i]
		}
	}
	return nil
}

// upToDate says whether writing want as this driver's entries (ours now)
// would change nothing. A deallocated claim needs no clear: it has no
// entries left, as kube-apiserver's dropDeallocatedStatusDevices removes
// those of deallocated devices in the status update that deallocates it.
func upToDate(ours, want []resourceapi.AllocatedDeviceStatus) bool {
	if len(ours) != len(want) {
		return false
	}
	for i := range want {
		if !sameEntry(ours[i], want[i]) {
			return false
		}
	}
	return true
}

// sameEntry compares two entries; their opaque data as JSON values, since
// the API server need not return the bytes it was given.
func sameEntry(a, b resourceapi.AllocatedDeviceStatus) bool {
	if !sameJSON(a.Data, b.Data) {
		return false
	}
	a.Data, b.Data = nil, nil
	return apiequality.Semantic.DeepEqual(a, b)
}

func sameJSON(a, b *runtime.RawExtension) bool {
	if a == nil || b == nil {
		return a == b
	}
	var va, vb any
	if json.Unmarshal(a.Raw, &va) != nil || json.Unmarshal(b.Raw, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
