// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import "k8s.io/dynamic-resource-allocation/deviceattribute"

// HostPCIeRoot resolves a PCI bus id to its PCIe root from the host's
// sysfs, by the DRA library's standard attribute: the
// nvmldiscovery.Options.PCIeRoot of a real node. A bus id without a root
// gives "" and no error, so the attribute is left out rather than failing
// discovery.
func HostPCIeRoot(busID string) (string, error) {
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID)
	if err != nil || attr.Value.StringValue == nil {
		return "", err
	}
	return *attr.Value.StringValue, nil
}
