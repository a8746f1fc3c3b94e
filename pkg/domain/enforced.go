// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

// What a node enforces, said plainly (issue 35 item 5). A node's
// memoryEnforcement (dmem, mps, none) is exact but terse; a platform team
// on an older driver must read, on the slice, in `kubectl gpufrac status`
// and in `kubectl describe resourceclaim`, what it gets: the guarantee is
// the scheduler's (the DRA allocator never over-commits a GPU's memory)
// everywhere, upheld on the GPU by MPS eviction only where MPS v3 runs on
// per-cgroup limits; a hard limit per container only with per-cgroup
// limits (driver r615+ on cgroup v2); the legacy MPS pinned-memory limit
// for SMSharing elsewhere, which a tenant can undo
// (docs/design/nvidia/mps-legacy.md, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT); and
// no limit at all for TimeSlicing there.

// Enforced is what a node enforces, one short phrase per part, each within
// a device attribute's 64 characters.
type Enforced struct {
	// Guarantee says what holds a share's guaranteed memory.
	Guarantee string
	// TimeSlicingLimit and SMSharingLimit say what caps a share's memory
	// in each compute mode.
	TimeSlicingLimit string
	SMSharingLimit   string
}

// Phrases of Enforced. Tests and docs quote them.
const (
	GuaranteeSchedulerAndEviction = "scheduler, and MPS eviction on the GPU"
	GuaranteeSchedulerOnly        = "scheduler only (no MPS eviction on the GPU)"
	LimitPerCgroup                = "hard limit per container (per-cgroup, r615+)"
	LimitNone                     = "none: no per-cgroup limits (pre-r615 or cgroup v1)"
	LimitLegacyMPS                = "legacy MPS pinned limit; a tenant can undo it"
	LimitRefusedNoMPS             = "refused: this node runs no MPS"
)

// EnforcedOn says what a node of enforcement e with MPS version mps
// enforces.
func EnforcedOn(e Enforcement, mps string) Enforced {
	out := Enforced{Guarantee: GuaranteeSchedulerOnly}
	switch e {
	case EnforcementDMem:
		if mps == MPSVersionV3 {
			out.Guarantee = GuaranteeSchedulerAndEviction
		}
		out.TimeSlicingLimit, out.SMSharingLimit = LimitPerCgroup, LimitPerCgroup
		if mps == MPSVersionNone {
			out.SMSharingLimit = LimitRefusedNoMPS
		}
	case EnforcementMPS:
		out.TimeSlicingLimit, out.SMSharingLimit = LimitNone, LimitLegacyMPS
	default:
		out.TimeSlicingLimit, out.SMSharingLimit = LimitNone, LimitRefusedNoMPS
	}
	return out
}

// ShareEnforced says in one sentence what is and is not enforced for a
// share of compute mode mode (TimeSlicing or SMSharing) prepared with
// enforcement e on a node running MPS version mps.
func ShareEnforced(e Enforcement, mode, mps string) string {
	switch {
	case e == EnforcementDMem && mps == MPSVersionV3:
		return "guaranteed memory held by the scheduler and upheld on the GPU by MPS eviction; the limit is a hard per-container limit set by the driver (per-cgroup limits, r615+)"
	case e == EnforcementDMem:
		return "guaranteed memory held by the scheduler only (no MPS daemon, so no eviction: the limit equals the request); the limit is a hard per-container limit set by the driver (per-cgroup limits, r615+)"
	case e == EnforcementMPS:
		return "guaranteed memory held by the scheduler only; the limit is the legacy MPS pinned-memory limit, which a tenant can undo (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT naming a GPU it cannot see drops it); no per-cgroup limit on this node (driver before r615, or cgroup v1)"
	case mode == "SMSharing":
		return "guaranteed memory held by the scheduler only; no hard limit"
	default:
		return "guaranteed memory held by the scheduler only; no hard limit: the container can allocate the whole GPU and a neighbour can run out of memory, because this node has no per-cgroup limits (driver before r615, or cgroup v1)"
	}
}

// AdminEnforced says what a device allocated with adminAccess gets.
const AdminEnforced = "adminAccess (monitoring): the GPU's device node and driver files; no memory limit, no MPS route, and no share of the GPU's guaranteed memory (neither the scheduler nor the node counts it)"
