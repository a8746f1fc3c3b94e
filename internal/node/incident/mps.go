// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package incident

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/core/plan"
)

// MPSEvent is an MPS server's report that it terminated a client: from
// the daemon's memacct audit log and control log, read by the MPS
// manager (internal/node/mps). NVIDIA documents that the server force-terminates an
// over-soft client when a within-soft client hits its hard limit, and that
// the victim's next call returns CUDA_ERROR_MPS_CLIENT_TERMINATED; it does
// not document the log lines, so their parsing lives with the reader and
// is marked inferred there (docs/incidents.md).
type MPSEvent struct {
	GPUUUID string
	// ClaimUID is the victim's claim, when the reader could tell it (from
	// the victim's cgroup and the hook's record of the container). It is
	// the only way to name a TimeSlicing client's claim: those connect to
	// the GPU's main socket and have no MPS namespace of their own.
	ClaimUID types.UID
	// Namespace is the victim's MPS v3 namespace: gpufrac names each
	// SMSharing claim's namespace after its UID (mpslayout.NamespaceFor),
	// so it identifies the claim without asking the kernel about PIDs.
	// Used when ClaimUID is empty.
	Namespace string
	PID       int
	// Container is the victim's container, when the reader found the
	// hook's record of it (the victim may be gone by the time anyone looks
	// at /proc); otherwise ContainerOf is asked.
	Container Container
	// Evicted: terminated for borrowing, to make room for the requester.
	Evicted bool
	// Refused: not terminated but refused at connection, because the GPU
	// waits for clients a fatal GPU exception ended to exit; the
	// requester fields name a client that has not.
	Refused bool
	// RequesterClaimUID and RequesterNamespace name the neighbour whose
	// action caused the termination (the within-request allocation of an
	// eviction, the fatal fault that took the GPU's clients down), when
	// the server says; the UID wins.
	RequesterClaimUID  types.UID
	RequesterNamespace string
	RequesterPID       int
	Detail             string
	Time               time.Time
}

// MPSEventSource is what an MPS manager offers for incidents.
// WatchTerminations registers report and returns at once; the manager
// then calls report, from its own goroutine, for every client its servers
// terminate, until it stops. The kubelet plugin connects any MPS manager
// that has this method (internal/node/plugin/incidents.go); nothing here
// depends on how the manager reads the daemon's logs.
type MPSEventSource interface {
	WatchTerminations(report func(MPSEvent))
}

// ContainerOf finds the container of a client PID on a GPU (from the
// hook's records and /proc/<pid>/cgroup); optional.
type ContainerOf func(gpuUUID string, pid int) (Container, bool)

// FromMPS turns an MPS termination into an incident against the prepared
// claim it names (by claim UID, else by MPS namespace); false when no
// prepared claim has a share on the GPU under that name (a client gpufrac
// did not route, or a claim already gone).
func FromMPS(node string, ev MPSEvent, prepared []plan.Claim, containerOf ContainerOf) (Incident, bool) {
	victim, ok := shareFor(prepared, ev.GPUUUID, ev.ClaimUID, ev.Namespace)
	if !ok {
		return Incident{}, false
	}
	inc := Incident{Kind: MPSTerminated, Active: true, Node: node, Share: victim, Detail: ev.Detail, Time: ev.Time}
	switch {
	case ev.Evicted:
		inc.Kind = MPSEvicted
	case ev.Refused:
		inc.Kind = MPSWedged
	}
	if n, ok := shareFor(prepared, ev.GPUUUID, ev.RequesterClaimUID, ev.RequesterNamespace); ok && n.ClaimUID != victim.ClaimUID {
		inc.Neighbour = &n
	}
	inc.Container = ev.Container
	if inc.Container.Pod == "" && containerOf != nil {
		if c, ok := containerOf(ev.GPUUUID, ev.PID); ok {
			inc.Container = c
		}
	}
	return inc, true
}

func shareFor(prepared []plan.Claim, gpu string, uid types.UID, namespace string) (Share, bool) {
	if uid != "" {
		for _, c := range prepared {
			if c.UID == uid {
				return shareOnGPU(c, gpu)
			}
		}
		return Share{}, false
	}
	if namespace == "" {
		return Share{}, false
	}
	for _, c := range prepared {
		for _, d := range c.Devices {
			if d.MPS != nil && d.MPS.Namespace == namespace && d.GPU.UUID == gpu {
				return shareOnGPU(c, gpu)
			}
		}
	}
	return Share{}, false
}

// ShareOf describes a planned share.
func ShareOf(c plan.Claim, d plan.Device) Share {
	s := Share{ClaimNamespace: c.Namespace, ClaimName: c.Name, ClaimUID: c.UID, Pool: d.Pool, Device: d.Device,
		GPUUUID: d.GPU.UUID, SoftBytes: d.SoftLimitBytes, HardBytes: d.HardLimitBytes}
	if d.ShareID != nil {
		s.ShareID = string(*d.ShareID)
	}
	return s
}
