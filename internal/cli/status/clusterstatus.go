// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package status summarises gpufrac in a cluster for people: per node
// and GPU, the model, memory, what is guaranteed, the limits, the
// over-commit, the claims with their pods and compute modes, and taints.
// It is a pure function of the ResourceSlices and ResourceClaims, so
// `kubectl gpufrac status` and tests share it.
package status

import (
	"encoding/json"
	"fmt"
	"sort"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Claim is one claim's share of a GPU.
type Claim struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID is the claim's UID: the plugin's metrics name a claim by it.
	UID     string   `json:"uid,omitempty"`
	Pods    []string `json:"pods"`
	Request int64    `json:"requestBytes"`
	// Limit and Mode come from the plugin's status.devices once prepared.
	Limit       int64  `json:"limitBytes,omitempty"`
	Mode        string `json:"computeMode,omitempty"`
	Enforcement string `json:"enforcement,omitempty"`
	Prepared    bool   `json:"prepared"`
	// Invalid says why the share's memory cannot be right (outside
	// (0, the GPU's memory]); such a share is listed, never summed.
	Invalid string `json:"invalid,omitempty"`
}

// Monitor is a claim allocated the GPU with DRA's adminAccess (a
// monitoring pod): it sees the GPU and holds no share of it, so it is
// listed apart from the claims and never summed.
type Monitor struct {
	Namespace string   `json:"namespace"`
	Name      string   `json:"name"`
	Pods      []string `json:"pods"`
	Prepared  bool     `json:"prepared"`
}

// GPU is one device of a node.
type GPU struct {
	Node   string `json:"node"`
	Device string `json:"device"`
	UUID   string `json:"uuid"`
	Model  string `json:"model"`
	Memory int64  `json:"memoryBytes"`
	// ServerReserve is what the GPU keeps back beyond Memory for the MPS
	// server's context (the slice's mpsServerReserveMiB); 0 where none.
	ServerReserve int64   `json:"serverReserveBytes,omitempty"`
	Guaranteed    int64   `json:"guaranteedBytes"`
	LimitSum      int64   `json:"limitSumBytes"`
	Overcommit    float64 `json:"overcommit"`
	Claims        []Claim `json:"claims"`
	// Enforcement is the node's memoryEnforcement (dmem, mps, none), and
	// Enforced what that means, from the slice's guaranteeHeldBy,
	// timeSlicingLimit and smSharingLimit (computed from memoryEnforcement
	// for a slice an older plugin wrote); empty when the slice says
	// neither.
	Enforcement string `json:"memoryEnforcement,omitempty"`
	Enforced    string `json:"enforced,omitempty"`
	// Monitors are the adminAccess claims on the GPU, apart from Claims.
	Monitors []Monitor `json:"monitors,omitempty"`
	Taints   []string  `json:"taints,omitempty"`
	// Type is the device's type: gpu (fractions) or mig (a MIG instance,
	// held whole by at most one claim); Profile is a MIG instance's.
	Type    string `json:"type"`
	Profile string `json:"profile,omitempty"`
}

// Build lists every gpufrac GPU (optionally of one node) with its claims.
func Build(slices []resourceapi.ResourceSlice, claims []resourceapi.ResourceClaim, node string) []GPU {
	gpus := gpusOf(slices, node)
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		var pods []string
		for _, r := range c.Status.ReservedFor {
			if r.Resource == "pods" {
				pods = append(pods, r.Name)
			}
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			g := gpus[r.Pool+"/"+r.Device]
			if r.Driver != v1alpha1.DriverName || g == nil {
				continue
			}
			if ptr.Deref(r.AdminAccess, false) {
				// The scheduler does not count it against the GPU, and
				// the node gives it no limit: whatever memory the
				// allocation records is not the GPU's.
				_, prepared := deviceData(c, r)
				g.Monitors = append(g.Monitors, Monitor{Namespace: c.Namespace, Name: c.Name, Pods: pods, Prepared: prepared})
				continue
			}
			// The API server accepts any consumedCapacity in a status
			// (issue 24): a figure outside (0, the GPU's memory] is shown
			// as such, not added up (1e30 would read as 0, sums overflow).
			mem := r.ConsumedCapacity[resourceslices.MemoryCapacity]
			if g.Type == domain.DeviceTypeMIG {
				// A MIG instance is held whole: no consumed capacity.
				mem = *resource.NewQuantity(g.Memory, resource.BinarySI)
			}
			cl := Claim{Namespace: c.Namespace, Name: c.Name, UID: string(c.UID), Pods: pods}
			if cl.Invalid = outside("consumed memory", mem, g.Memory); cl.Invalid == "" {
				cl.Request, cl.Limit = mem.Value(), mem.Value()
			}
			if data, ok := deviceData(c, r); ok {
				cl.Prepared, cl.Mode, cl.Enforcement = true, data.ComputeMode, data.Enforcement
				if q, err := v1alpha1.ParseQuantity(data.MemoryLimit); err == nil && cl.Invalid == "" {
					if cl.Invalid = outside("memory limit", q, g.Memory); cl.Invalid == "" {
						cl.Limit = q.Value()
					}
				}
			}
			if cl.Invalid == "" {
				g.Guaranteed += cl.Request
				g.LimitSum += cl.Limit
			}
			g.Claims = append(g.Claims, cl)
		}
	}
	out := make([]GPU, 0, len(gpus))
	for _, g := range gpus {
		if g.Memory > 0 {
			g.Overcommit = float64(g.LimitSum) / float64(g.Memory)
		}
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		if a, b := deviceOrder(out[i].Device), deviceOrder(out[j].Device); a != b {
			return a < b
		}
		return out[i].Device < out[j].Device
	})
	return out
}

// enforced reads what a slice device says its node enforces.
func enforced(d resourceapi.Device) (string, string) {
	str := func(name resourceapi.QualifiedName) string { return ptr.Deref(d.Attributes[name].StringValue, "") }
	enf := str(resourceslices.AttrMemoryEnforcement)
	e := domain.Enforced{Guarantee: str(resourceslices.AttrGuaranteeHeldBy),
		TimeSlicingLimit: str(resourceslices.AttrTimeSlicingLimit), SMSharingLimit: str(resourceslices.AttrSMSharingLimit)}
	if e.Guarantee == "" || e.TimeSlicingLimit == "" || e.SMSharingLimit == "" {
		parsed, err := domain.ParseEnforcement(enf)
		if err != nil {
			return "", ""
		}
		e = domain.EnforcedOn(parsed, str(resourceslices.AttrMPSVersion))
	}
	return enf, fmt.Sprintf("guarantee: %s; TimeSlicing limit: %s; SMSharing limit: %s", e.Guarantee, e.TimeSlicingLimit, e.SMSharingLimit)
}

// gpusOf lists the gpufrac devices (GPUs and MIG instances) of the slices
// (of one node, when node is set), by pool/device.
func gpusOf(slices []resourceapi.ResourceSlice, node string) map[string]*GPU {
	gpus := map[string]*GPU{}
	for _, s := range slices {
		if s.Spec.Driver != v1alpha1.DriverName || s.Spec.NodeName == nil || (node != "" && *s.Spec.NodeName != node) {
			continue
		}
		for _, d := range s.Spec.Devices {
			gpus[s.Spec.Pool.Name+"/"+d.Name] = deviceGPU(*s.Spec.NodeName, &d)
		}
	}
	return gpus
}

// deviceGPU is the status entry of one slice device, before its claims.
func deviceGPU(node string, d *resourceapi.Device) *GPU {
	capacity := d.Capacity[resourceslices.MemoryCapacity].Value
	g := &GPU{Node: node, Device: d.Name, Memory: capacity.Value()}
	g.UUID = ptr.Deref(d.Attributes[resourceslices.AttrUUID].StringValue, "")
	g.Model = ptr.Deref(d.Attributes[resourceslices.AttrProductName].StringValue, "")
	g.Type = resourceslices.DeviceType(d)
	if g.Type == domain.DeviceTypeMIG {
		g.Profile = ptr.Deref(d.Attributes[resourceslices.AttrMIGProfile].StringValue, "")
		g.Model += " MIG " + g.Profile
	}
	// A reserve the slice states, within what a GPU can have (the bound
	// keeps the shift from overflowing on a hostile slice).
	if r := ptr.Deref(d.Attributes[resourceslices.AttrMPSServerReserveMiB].IntValue, 0); r > 0 && r < 1<<32 {
		g.ServerReserve = r << 20
	}
	g.Enforcement, g.Enforced = enforced(*d)
	for _, t := range d.Taints {
		g.Taints = append(g.Taints, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	return g
}

// outside describes a share's figure that no share of a GPU of memory
// bytes can have, "" when it can.
func outside(what string, q resource.Quantity, memory int64) string {
	if q.Sign() <= 0 || q.Cmp(*resource.NewQuantity(memory, resource.BinarySI)) > 0 {
		return fmt.Sprintf("%s %s is outside (0, %s], the GPU's memory", what, q.String(), resource.NewQuantity(memory, resource.BinarySI).String())
	}
	return ""
}

// deviceData finds the plugin's status entry for one allocated share.
func deviceData(c resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) (domain.DeviceData, bool) {
	for _, d := range c.Status.Devices {
		if d.Driver != r.Driver || d.Pool != r.Pool || d.Device != r.Device || ptr.Deref(d.ShareID, "") != string(ptr.Deref(r.ShareID, "")) || d.Data == nil {
			continue
		}
		var data domain.DeviceData
		if json.Unmarshal(d.Data.Raw, &data) == nil {
			return data, true
		}
	}
	return domain.DeviceData{}, false
}
