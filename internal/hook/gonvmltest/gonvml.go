// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package gonvmltest presents a go-nvml Interface (in practice go-nvml's mock
// server, which the node's tests build their simulated GPUs from) as a
// purenvml.Interface, so code that calls NVML through purenvml is tested
// against the same doubles as the rest of the node. It links go-nvml, so
// cgo: the hook itself never imports it.
package gonvmltest

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpufrac/gpufrac/internal/hook/purenvml"
)

// Wrap returns lib as a purenvml.Interface. The return codes are the same
// numbers (both are nvml.h's nvmlReturn_t).
func Wrap(lib nvml.Interface) purenvml.Interface { return library{lib} }

type library struct{ l nvml.Interface }

func (w library) Init() purenvml.Return     { return purenvml.Return(w.l.Init()) }
func (w library) Shutdown() purenvml.Return { return purenvml.Return(w.l.Shutdown()) }

// ErrorString is go-nvml's text for the code, which is what go-nvml's own
// ErrorString returns (its mocks leave the method unset).
func (w library) ErrorString(r purenvml.Return) string { return nvml.Return(r).Error() }

func (w library) Extensions() purenvml.ExtendedInterface {
	ext := w.l.Extensions()
	if ext == nil {
		return nil
	}
	return ext
}

func (w library) DeviceGetHandleByUUID(uuid string) (purenvml.Device, purenvml.Return) {
	d, ret := w.l.DeviceGetHandleByUUID(uuid)
	if d == nil {
		return nil, purenvml.Return(ret)
	}
	return device{d}, purenvml.Return(ret)
}

type device struct{ d nvml.Device }

func (w device) SetMemoryLimits_v1(cgroup string, soft, hard uint64) purenvml.Return {
	return purenvml.Return(w.d.SetMemoryLimits_v1(cgroup, soft, hard))
}

func (w device) GetMemoryLimits_v1(cgroup string) (purenvml.MemoryLimits_v1, purenvml.Return) {
	m, ret := w.d.GetMemoryLimits_v1(cgroup)
	return purenvml.MemoryLimits_v1(m), purenvml.Return(ret)
}
