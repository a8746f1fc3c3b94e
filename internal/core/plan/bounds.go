// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan

import (
	"fmt"
	"regexp"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// An allocation is written by the scheduler, but the API server accepts
// any status.allocation from whoever may update a claim's status, so
// nothing in it is trusted before arithmetic: the consumed memory of each
// share must be a whole number of bytes in (0, the memory the GPU offers],
// the shares of one GPU in one claim may not together consume more than
// that, and a claim may not hold more shares than the node can (every GPU
// cut into shares of domain.MemoryMin, the smallest its slice allows).
// These bounds also keep every sum of limits far below int64's range.

// MaxShares is how many shares the node described by inv can hold at
// once: what each GPU offers divided by the smallest share, and one per
// MIG instance (allocated whole).
func MaxShares(inv *domain.Inventory) int {
	minShare := domain.MemoryMin.Value()
	n := len(inv.MIGDevices)
	for _, g := range inv.GPUs {
		offered := domain.OfferedMemory(g)
		n += int(offered.Value() / minShare)
	}
	return n
}

// checkShareCount refuses a claim with more gpufrac results than the node
// can hold, before any of them is planned.
func checkShareCount(results []resourceapi.DeviceRequestAllocationResult, inv *domain.Inventory, path *field.Path) *field.Error {
	n := 0
	for _, r := range results {
		if r.Driver == v1alpha1.DriverName {
			n++
		}
	}
	if limit := MaxShares(inv); n > limit {
		return field.Invalid(path, n, fmt.Sprintf(
			"%d gpufrac shares in one claim, but this node's %d GPUs hold at most %d (shares of at least %s)",
			n, len(inv.GPUs), limit, domain.MemoryMin.String()))
	}
	return nil
}

// consumedBytes is the memory a share consumes, in bytes, if the
// allocation's value is one the scheduler could have recorded on gpu.
func consumedBytes(q resource.Quantity, gpu domain.GPU, path *field.Path) (int64, *field.Error) {
	offered := domain.OfferedMemory(gpu)
	v, exact := q.AsInt64()
	if !exact || v <= 0 || v > offered.Value() {
		return 0, field.Invalid(path, q.String(), fmt.Sprintf(
			"must be a whole number of bytes in (0, %s], the memory GPU %s offers on this node (%d bytes)",
			offered.String(), domain.DeviceName(gpu.Index), offered.Value()))
	}
	return v, nil
}

// checkPerGPUConsumed refuses shares of one GPU that together consume more
// than it offers (the scheduler's accounting never allows that), or whose
// hard limits add up to more than its memory.
func checkPerGPUConsumed(devs []Device, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, g := range (&Claim{Devices: devs}).PerGPU() {
		var gpu domain.GPU
		shares, mig := 0, false
		for _, d := range devs {
			if d.GPU.UUID == g.UUID {
				gpu = d.GPU
				shares++
				mig = mig || d.MIG != nil
			}
		}
		if mig {
			// A MIG instance is one device, allocated whole: the
			// scheduler gives it to one request, and it has no limits.
			continue
		}
		offered := domain.OfferedMemory(gpu)
		if g.SoftLimitBytes > offered.Value() {
			errs = append(errs, field.Invalid(path, resource.NewQuantity(g.SoftLimitBytes, resource.BinarySI).String(), fmt.Sprintf(
				"the claim's shares of GPU %s consume this much together, more than the %s it offers on this node",
				domain.DeviceName(gpu.Index), offered.String())))
			continue
		}
		// A container gets the sum of its claim's limits on a GPU; NVML
		// refuses a limit above the GPU's memory, which would fail every
		// container of the claim at creation instead of here.
		// (One share's limit is checked against it where it is configured.)
		if total := int64(gpu.MemoryBytes); shares > 1 && g.HardLimitBytes > total {
			errs = append(errs, field.Invalid(path, resource.NewQuantity(g.HardLimitBytes, resource.BinarySI).String(), fmt.Sprintf(
				"the memoryLimits of the claim's shares of GPU %s add up to this, more than its memory %s; a container gets their sum",
				domain.DeviceName(gpu.Index), resource.NewQuantity(total, resource.BinarySI).String())))
		}
	}
	return errs
}

// uidPattern is the character set of the IDs that name files and CDI
// devices: a claim's UID (the API server makes it, a UUID) and a share's
// ShareID (the API documents it as format k8s-uuid, a lowercase UUID).
// Both are checked anyway (ShareID here, the claim's UID by the preparer), more loosely than a UUID (letters, digits,
// -) so that nothing able to climb out of a directory or break a CDI
// device name reaches a path.
var uidPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

func checkUID(uid string, path *field.Path) *field.Error {
	if uidPattern.MatchString(uid) {
		return nil
	}
	return field.Invalid(path, safetext.Cap(uid, 128), "must be a UID: lowercase letters, digits and '-', starting with a letter or digit, at most 63 characters")
}

// ValidUID tells whether uid has a UID's character set (see uidPattern).
// The node checks a claim's UID before naming files after it (Compute does
// not: the CLI plans claims it only imagines, named after their pods).
func ValidUID(uid string) bool { return uidPattern.MatchString(uid) }
