// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package why

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

type resourceQuantity = resource.Quantity

func quantity(bytes int64) resource.Quantity {
	return *resource.NewQuantity(bytes, resource.BinarySI)
}

// deviceLess sorts gpu-2 before gpu-10.
func deviceLess(a, b string) bool {
	na, errA := strconv.Atoi(strings.TrimPrefix(a, "gpu-"))
	nb, errB := strconv.Atoi(strings.TrimPrefix(b, "gpu-"))
	if errA == nil && errB == nil {
		return na < nb
	}
	return a < b
}

// shares lists the allocated shares of the target's claims, and the
// reasons the node's plugin refuses the ones it will not prepare.
func (w *world) shares(_ context.Context, target Target) ([]Share, []Reason) {
	var out []Share
	var problems []Reason
	for _, c := range target.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		name := c.Namespace + "/" + c.Name
		unprepared := ""
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != v1alpha1.DriverName || ptr.Deref(r.AdminAccess, false) {
				continue // a monitor (adminAccess) is no share
			}
			mem := r.ConsumedCapacity[resourceslices.MemoryCapacity]
			s := Share{Claim: name, Request: r.Request, Node: r.Pool, Device: r.Device, RequestBytes: mem.Value()}
			if info, ok := w.devices[deviceKey{r.Pool, r.Device}]; ok {
				s.UUID = stringAttr(info.dev, resourceslices.AttrUUID)
				s.Model = stringAttr(info.dev, resourceslices.AttrProductName)
				if resourceslices.DeviceType(&info.dev) == domain.DeviceTypeMIG {
					s.Model += " MIG " + stringAttr(info.dev, resourceslices.AttrMIGProfile)
				}
				s.Node = info.node
				if r.ShareID == nil {
					s.RequestBytes = capacityOf(info.dev)
				}
			}
			if st, ok := deviceStatus(c, r); ok {
				for _, cond := range st.Conditions {
					s.Conditions = append(s.Conditions, fmt.Sprintf("%s=%s %s: %s", cond.Type, cond.Status, cond.Reason, cond.Message))
				}
				var data domain.DeviceData
				if st.Data != nil && json.Unmarshal(st.Data.Raw, &data) == nil {
					s.Prepared = true
					s.UUID = data.UUID
					s.ComputeMode, s.Enforcement, s.MPSServer = data.ComputeMode, data.Enforcement, data.MPSServer
					if l, err := v1alpha1.ParseQuantity(data.MemoryLimit); err == nil {
						s.LimitBytes = l.Value()
					}
				}
			}
			if !s.Prepared {
				unprepared = s.Node
			}
			for _, u := range w.snap.Usage {
				if u.ClaimUID == string(c.UID) && (s.UUID == "" || u.GPUUUID == s.UUID) {
					s.Usage = append(s.Usage, u)
				}
			}
			out = append(out, s)
		}
		if unprepared != "" {
			for _, msg := range w.planErrors(unprepared, c) {
				problems = append(problems, Reason{Code: NodeRefuses, Claim: name, Message: msg})
			}
		}
	}
	return out, problems
}

// deviceStatus is the plugin's status.devices entry for one share.
func deviceStatus(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) (resourceapi.AllocatedDeviceStatus, bool) {
	for _, d := range c.Status.Devices {
		if d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device && ptr.Deref(d.ShareID, "") == string(ptr.Deref(r.ShareID, "")) {
			return d, true
		}
	}
	return resourceapi.AllocatedDeviceStatus{}, false
}
