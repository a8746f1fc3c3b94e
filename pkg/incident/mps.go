package incident

import (
	"time"

	"github.com/gpufrac/gpufrac/pkg/plan"
)

// MPSEvent is an MPS server's report that it terminated a client: from
// the daemon's memacct audit log and control log, read by the MPS
// manager (pkg/mps). NVIDIA documents that the server force-terminates an
// over-soft client when a within-soft client hits its hard limit, and that
// the victim's next call returns CUDA_ERROR_MPS_CLIENT_TERMINATED; it does
// not document the log lines, so their parsing lives with the reader and
// is marked inferred there (docs/incidents.md).
type MPSEvent struct {
	GPUUUID string
	// Namespace is the victim's MPS v3 namespace: gpufrac names each
	// claim's namespace after its UID (plan.MPSNamespaceFor), so it
	// identifies the claim without asking the kernel about PIDs.
	Namespace string
	PID       int
	// Evicted: terminated for borrowing, to make room for the requester.
	Evicted bool
	// RequesterNamespace is the within-request neighbour whose
	// allocation caused the eviction, when the server says.
	RequesterNamespace string
	RequesterPID       int
	Detail             string
	Time               time.Time
}

// MPSEventSource is what an MPS manager offers for incidents.
// WatchTerminations registers report and returns at once; the manager
// then calls report, from its own goroutine, for every client its servers
// terminate, until it stops. The kubelet plugin connects any MPS manager
// that has this method (pkg/nodeplugin/incidents.go); nothing here
// depends on how the manager reads the daemon's logs.
type MPSEventSource interface {
	WatchTerminations(report func(MPSEvent))
}

// ContainerOf finds the container of a client PID on a GPU (from the
// hook's records and /proc/<pid>/cgroup); optional.
type ContainerOf func(gpuUUID string, pid int) (Container, bool)

// FromMPS turns an MPS termination into an incident against the prepared
// claim whose namespace it names; false when no prepared claim has that
// namespace (a client gpufrac did not route, or a claim already gone).
func FromMPS(node string, ev MPSEvent, prepared []plan.Claim, containerOf ContainerOf) (Incident, bool) {
	victim, ok := shareByNamespace(prepared, ev.GPUUUID, ev.Namespace)
	if !ok {
		return Incident{}, false
	}
	inc := Incident{Kind: MPSTerminated, Active: true, Node: node, Share: victim, Detail: ev.Detail, Time: ev.Time}
	if ev.Evicted {
		inc.Kind = MPSEvicted
		if n, ok := shareByNamespace(prepared, ev.GPUUUID, ev.RequesterNamespace); ok {
			inc.Neighbour = &n
		}
	}
	if containerOf != nil {
		if c, ok := containerOf(ev.GPUUUID, ev.PID); ok {
			inc.Container = c
		}
	}
	return inc, true
}

func shareByNamespace(prepared []plan.Claim, gpu, namespace string) (Share, bool) {
	if namespace == "" {
		return Share{}, false
	}
	for _, c := range prepared {
		for _, d := range c.Devices {
			if d.MPS != nil && d.MPS.Namespace == namespace && d.GPU.UUID == gpu {
				return ShareOf(c, d), true
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
