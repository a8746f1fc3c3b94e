// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// CheckRecorded applies to a plan read back from the node's checkpoint the
// bounds Compute applies to a fresh claim, so that a file's checksum (which
// anyone able to write the file can also write) is not all that vouches
// for what it holds: a UID and names that name files and objects safely,
// at least one and at most MaxShares shares, each in this node's pool on
// a GPU of its inventory (found by UUID; the record's copy of the GPU is
// not believed), guaranteed memory in (0, what the GPU offers], a limit in
// [guarantee, the GPU's memory], and the shares of each GPU within what it
// offers. Limits of a plan Compute made always pass.
func CheckRecorded(c *Claim, inv *domain.Inventory, opts Options) error {
	var errs []error
	if !ValidUID(string(c.UID)) {
		errs = append(errs, fmt.Errorf("uid %q is not a UID", safetext.Cap(string(c.UID), 64)))
	}
	if len(validation.IsDNS1123Label(c.Namespace)) > 0 || len(validation.IsDNS1123Subdomain(c.Name)) > 0 {
		errs = append(errs, fmt.Errorf("%q/%q does not name a claim", safetext.Cap(c.Namespace, 64), safetext.Cap(c.Name, 256)))
	}
	if n, most := len(c.Devices), MaxShares(inv); n == 0 || n > most {
		errs = append(errs, fmt.Errorf("%d shares, want 1 to %d (this node's GPUs cut into shares of %s)", n, most, domain.MemoryMin.String()))
		return errors.Join(errs...)
	}
	perGPU := map[string]int64{}
	for i, d := range c.Devices {
		if err := checkRecordedDevice(d, inv, opts); err != nil {
			errs = append(errs, fmt.Errorf("devices[%d]: %w", i, err))
			continue
		}
		if d.MIG == nil {
			perGPU[d.GPU.UUID] += d.SoftLimitBytes
		}
	}
	for uuid, sum := range perGPU {
		gpu, _ := inv.GPUByUUID(uuid)
		if offered := domain.PublishedMemory(gpu.MemoryBytes); sum > offered.Value() {
			errs = append(errs, fmt.Errorf("shares of GPU %s guarantee %d bytes together, more than the %d it offers", uuid, sum, offered.Value()))
		}
	}
	return errors.Join(errs...)
}

func checkRecordedDevice(d Device, inv *domain.Inventory, opts Options) error {
	if d.Pool != opts.NodeName {
		return fmt.Errorf("pool %q is not this node's (%q)", safetext.Cap(d.Pool, 256), opts.NodeName)
	}
	if d.MIG != nil {
		return checkRecordedMIG(d, inv)
	}
	gpu, ok := inv.GPUByUUID(d.GPU.UUID)
	if !ok || d.Device != domain.DeviceName(gpu.Index) {
		return fmt.Errorf("GPU %q (device %q) is not one of this node's", safetext.Cap(d.GPU.UUID, 128), safetext.Cap(d.Device, 128))
	}
	if d.ShareID != nil && !ValidUID(string(*d.ShareID)) {
		return fmt.Errorf("shareID %q is not a UID", safetext.Cap(string(*d.ShareID), 64))
	}
	if d.AdminAccess {
		// A monitoring device holds nothing: no limit, no MPS route.
		if d.SoftLimitBytes != 0 || d.HardLimitBytes != 0 || d.MPS != nil {
			return fmt.Errorf("adminAccess device on GPU %s with limits (%d, %d bytes) or an MPS route; it has neither", gpu.UUID, d.SoftLimitBytes, d.HardLimitBytes)
		}
		return nil
	}
	offeredQ := domain.PublishedMemory(gpu.MemoryBytes)
	offered := offeredQ.Value()
	if d.SoftLimitBytes <= 0 || d.SoftLimitBytes > offered {
		return fmt.Errorf("guaranteed memory %d bytes, want (0, %d] on GPU %s", d.SoftLimitBytes, offered, gpu.UUID)
	}
	if d.HardLimitBytes < d.SoftLimitBytes || uint64(d.HardLimitBytes) > gpu.MemoryBytes {
		return fmt.Errorf("memory limit %d bytes, want [%d, %d] on GPU %s", d.HardLimitBytes, d.SoftLimitBytes, gpu.MemoryBytes, gpu.UUID)
	}
	return nil
}

// checkRecordedMIG: a share of a MIG instance must name an instance this
// node still has (same device name and UUID: an instance deleted and
// recreated has a new UUID), with limits equal to its memory.
func checkRecordedMIG(d Device, inv *domain.Inventory) error {
	m, ok := inv.MIGByName(d.Device)
	if !ok || m.UUID != d.GPU.UUID {
		return fmt.Errorf("MIG instance %q (device %q, %s) is no longer configured on this node", safetext.Cap(d.GPU.UUID, 128), safetext.Cap(d.Device, 128), safetext.Cap(d.MIG.Profile, 64))
	}
	if d.SoftLimitBytes != int64(m.MemoryBytes) || d.HardLimitBytes != int64(m.MemoryBytes) {
		return fmt.Errorf("MIG instance %s: recorded memory %d/%d bytes, want its %d", m.UUID, d.SoftLimitBytes, d.HardLimitBytes, m.MemoryBytes)
	}
	return nil
}
