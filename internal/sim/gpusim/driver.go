// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package gpusim

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
	"github.com/gpufrac/gpufrac/internal/sim/simdriver"
)

// The simulated driver the hook loads lives in internal/sim/simdriver,
// which links no cgo (the hook is built with CGO_ENABLED=0); these names
// keep gpusim's callers as they were.
type (
	// Driver is simdriver.Driver.
	Driver = simdriver.Driver
	// DriverGPU is simdriver.DriverGPU.
	DriverGPU = simdriver.DriverGPU
	// LimitRecord is simdriver.LimitRecord.
	LimitRecord = simdriver.LimitRecord
)

// SetMemoryLimitsSymbol is simdriver.SetMemoryLimitsSymbol.
const SetMemoryLimitsSymbol = simdriver.SetMemoryLimitsSymbol

// DriverFor describes the driver of a simulated NVML server.
func DriverFor(srv *server.Server, cgroupV2 bool) Driver {
	d := Driver{Marker: simdriver.Marker, DriverVersion: srv.DriverVersion, CgroupV2: cgroupV2}
	for _, dev := range srv.Devices {
		sd := dev.(*server.Device)
		d.GPUs = append(d.GPUs, DriverGPU{UUID: sd.UUID, MemoryBytes: sd.MemoryInfo.Total})
	}
	return d
}

// InstallDriver is simdriver.Install.
func InstallDriver(driverRoot, libDir string, d Driver) (string, error) {
	return simdriver.Install(driverRoot, libDir, d)
}

// OpenDriver is simdriver.Open.
func OpenDriver(libPath, recordPath string) (purenvml.Interface, error) {
	return simdriver.Open(libPath, recordPath)
}

// ReadRecords is simdriver.ReadRecords.
func ReadRecords(path string) ([]LimitRecord, error) { return simdriver.ReadRecords(path) }

// Reservations is simdriver.Reservations.
func Reservations(records []LimitRecord, root string) map[string]map[string]uint64 {
	return simdriver.Reservations(records, root)
}
