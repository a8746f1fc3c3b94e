// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// PodGetter reads the pod ref that claim is reserved for (in the claim's
// namespace).
type PodGetter func(ctx context.Context, claim *resourceapi.ResourceClaim, ref resourceapi.ResourceClaimConsumerReference) (*corev1.Pod, error)

// checkOneGuarantee refuses a claim whose guaranteed memory the node
// enforces per container (dmem) when more than one container or pod would
// hold it (plan.CheckOneGuarantee). Where nothing is enforced per cgroup a
// shared claim multiplies nothing, and passes.
func (p *Preparer) checkOneGuarantee(ctx context.Context, claim *resourceapi.ResourceClaim, pl *plan.Claim) error {
	enforced := false
	for _, d := range pl.Devices {
		enforced = enforced || d.Enforcement == domain.EnforcementDMem
	}
	if !enforced {
		return nil
	}
	var pods []*corev1.Pod
	if p.cfg.Pods != nil {
		for _, r := range claim.Status.ReservedFor {
			if r.Resource != "pods" || r.APIGroup != "" {
				continue
			}
			pod, err := p.cfg.Pods(ctx, claim, r)
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("reading pod %s/%s, which claim %s uses: %w", claim.Namespace, r.Name, claim.Name, err)
			}
			if pod.UID == r.UID {
				pods = append(pods, pod)
			}
		}
	}
	if err := plan.CheckOneGuarantee(claim, pods); err != nil {
		return &plan.InvalidError{Namespace: claim.Namespace, Name: claim.Name,
			Errs: field.ErrorList{field.Forbidden(field.NewPath("status", "reservedFor"), err.Error())}}
	}
	return nil
}
