// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package resourceslices

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Attributes that say plainly what the node enforces (domain.EnforcedOn),
// beside the terse memoryEnforcement: what holds a share's guarantee, and
// what caps a TimeSlicing and an SMSharing share's memory. A platform team
// on an older driver reads there that the guarantee is the scheduler's
// alone and what, if anything, limits a container; a DeviceClass may
// select on them (e.g. timeSlicingLimit == the per-cgroup phrase).
const (
	AttrGuaranteeHeldBy  resourceapi.QualifiedName = "guaranteeHeldBy"
	AttrTimeSlicingLimit resourceapi.QualifiedName = "timeSlicingLimit"
	AttrSMSharingLimit   resourceapi.QualifiedName = "smSharingLimit"
)

// addEnforced adds the enforced attributes of inv's node to attrs.
func addEnforced(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, inv *domain.Inventory) {
	e := domain.EnforcedOn(inv.Enforcement, inv.MPSVersion)
	attrs[AttrGuaranteeHeldBy] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(e.Guarantee))}
	attrs[AttrTimeSlicingLimit] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(e.TimeSlicingLimit))}
	attrs[AttrSMSharingLimit] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(e.SMSharingLimit))}
}
