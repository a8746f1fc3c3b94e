// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package claimstatus

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/plan"
)

// shareCondition identifies one condition of one share.
type shareCondition struct {
	pool, device, shareID, condType string
}

// SetShareCondition sets cond on this driver's status.devices entry for
// one share of a claim (an incident: borrowing, at the hard limit, MPS
// client terminated), keeping every other entry and condition. It is
// remembered, so later rewrites of the claim's status (a new MPS server
// state) keep it until the claim is unprepared. A share without an entry
// yet gets it with the entry.
func (w *Writer) SetShareCondition(ctx context.Context, namespace, name, uid, pool, device, shareID string, cond metav1.Condition) error {
	k := key{namespace, name, types.UID(uid)}
	w.mu.Lock()
	if w.incidents == nil {
		w.incidents = map[key]map[shareCondition]metav1.Condition{}
	}
	if w.incidents[k] == nil {
		w.incidents[k] = map[shareCondition]metav1.Condition{}
	}
	w.incidents[k][shareCondition{pool, device, shareID, cond.Type}] = cond
	w.mu.Unlock()

	claims := w.client.ResourceV1().ResourceClaims(namespace)
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		claim, err := claims.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(claim.UID) != uid {
			return nil
		}
		changed := false
		for i := range claim.Status.Devices {
			d := &claim.Status.Devices[i]
			if d.Driver == v1alpha1.DriverName && d.Pool == pool && d.Device == device && ptr.Deref(d.ShareID, "") == shareID {
				changed = apimeta.SetStatusCondition(&d.Conditions, cond) || changed
			}
		}
		if !changed {
			return nil
		}
		_, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{FieldManager: w.fieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("setting condition %s on claim %s/%s: %w", cond.Type, namespace, name, err)
	}
	return nil
}

// withIncidents adds the remembered incident conditions to a claim's
// entries; a claim no longer prepared (nil) forgets them.
func (w *Writer) withIncidents(k key, c *plan.Claim, want []resourceapi.AllocatedDeviceStatus) []resourceapi.AllocatedDeviceStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	if c == nil {
		delete(w.incidents, k)
		return want
	}
	for sc, cond := range w.incidents[k] {
		for i := range want {
			d := &want[i]
			if d.Pool == sc.pool && d.Device == sc.device && ptr.Deref(d.ShareID, "") == sc.shareID {
				apimeta.SetStatusCondition(&d.Conditions, cond)
			}
		}
	}
	return want
}
