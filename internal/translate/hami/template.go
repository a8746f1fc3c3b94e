// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hami

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

const mib = int64(1) << 20

// RequestName is the request of every translated claim.
const RequestName = "gpu"

// typeGPU keeps a request on whole GPUs (type "gpu"; a device without the
// attribute, from an older plugin, counts as one), never on MIG devices.
const typeGPU = `(!("type" in device.attributes["gpufrac.dev"]) || device.attributes["gpufrac.dev"].type == "gpu")`

// alternative is what one kind of GPU gives the request: memoryMiB is
// HAMi's figure, ask what the claim asks (nil: the whole capacity).
type alternative struct {
	gpu       GPU
	memoryMiB int64
	ask       *resource.Quantity
}

// build turns one container's admitted request into its claim template.
func build(namespace string, req *request, opts Options) (*resourceapi.ResourceClaimTemplate, []string, error) {
	if bound, source := v1alpha1.MaxDevices(opts.MaxGPUsPerNode); req.count > int64(bound) {
		return nil, nil, Errors{{Container: req.container, Resource: string(ResourceCount), Rule: fmt.Sprintf("gpufrac: %d GPUs; must be at most %d, %s", req.count, bound, source)}}
	}
	dreq := resourceapi.DeviceRequest{Name: RequestName}
	var notes []string
	switch alts, err := alternatives(req, opts); {
	case err != nil:
		return nil, nil, err
	case req.exclusive():
		// No capacity asked: the allocator takes the slice's requestPolicy
		// default, the whole capacity, so no share fits beside it.
		dreq.Exactly = exact(opts.Class, req.count, nil)
	case alts == nil:
		// No GPU kinds known: MiB asked of any GPU, bounded by the catalog.
		q := *resource.NewQuantity(req.memMiB*mib, resource.BinarySI)
		dreq.Exactly = exact(opts.Class, req.count, &q)
		notes = append(notes, allocatedNote(RequestName, req.memMiB, q, opts)...)
	default:
		for _, a := range alts {
			sub := resourceapi.DeviceSubRequest{
				Name: fmt.Sprintf("gpu-%d-%d", a.gpu.TotalMiB, a.gpu.Capacity.Value()/mib), DeviceClassName: opts.Class,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: req.count,
				Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
					`%s && "memoryTotalMiB" in device.attributes["gpufrac.dev"] && device.attributes["gpufrac.dev"].memoryTotalMiB == %d && device.capacity["gpufrac.dev"].memory.compareTo(quantity(%q)) == 0`,
					typeGPU, a.gpu.TotalMiB, a.gpu.Capacity.String())}}},
			}
			if a.ask != nil {
				sub.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": *a.ask}}
				notes = append(notes, allocatedNote(RequestName+"/"+sub.Name, a.memoryMiB, *a.ask, opts)...)
			} else {
				notes = append(notes, fmt.Sprintf("%s: HAMi %d MiB of a %d MiB GPU; the slice offers %s (the rest is the node's MPS server reserve): gpufrac asks the whole capacity, %d MiB less",
					RequestName+"/"+sub.Name, a.memoryMiB, a.gpu.TotalMiB, a.gpu.Capacity.String(), a.memoryMiB-a.gpu.Capacity.Value()/mib))
			}
			dreq.FirstAvailable = append(dreq.FirstAvailable, sub)
		}
	}
	spec := resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{dreq}}}
	if req.count > 1 {
		// Shares of a multi-GPU ask land on distinct GPUs, as HAMi's Fit
		// takes each device once.
		spec.Devices.Constraints = []resourceapi.DeviceConstraint{{
			Requests: []string{RequestName}, DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName(v1alpha1.DriverName + "/uuid")),
		}}
	}
	tmpl, err := translated.ClaimTemplate("gpufrac-hami-", namespace, spec)
	if err != nil {
		return nil, nil, err
	}
	annotations, warnings := notesOf(req, notes)
	if len(annotations) > 0 {
		tmpl.Annotations = annotations
	}
	return tmpl, warnings, nil
}

// notesOf are the template's annotations (rounding, compute) and the
// pod's warnings.
func notesOf(req *request, rounding []string) (map[string]string, []string) {
	annotations := map[string]string{}
	var warnings []string
	if len(rounding) > 0 {
		annotations[AnnotationRounding] = strings.Join(rounding, "; ")
	}
	switch {
	case req.exclusive():
		annotations[AnnotationCompute] = "gpucores 100: HAMi gives the container the GPU alone; gpufrac's claim asks the GPU's whole memory capacity, so no other share is placed on it"
		if req.memMiB > 0 || (req.percent != 101 && req.percent < 100) {
			warnings = append(warnings, fmt.Sprintf("container %s: gpucores 100 with a memory ask: HAMi holds the GPU alone and caps the container's memory at its ask; gpufrac's claim holds the whole GPU and its whole memory (no cap below it)", req.container))
		}
	case req.cores > 0:
		note := fmt.Sprintf("gpucores %d: HAMi's HAMi-core throttles the container to %d%% of the GPU's time; a gpufrac TimeSlicing share has no compute cap: not enforced", req.cores, req.cores)
		annotations[AnnotationCompute] = note
		warnings = append(warnings, fmt.Sprintf("container %s: %s", req.container, note))
	}
	return annotations, warnings
}

// alternatives lists, smaller GPUs first, what each kind of GPU gives the
// request (nil for an exclusive ask, or for MiB asked of a cluster whose
// GPU kinds are unknown), or the refusal when none can hold it.
func alternatives(req *request, opts Options) ([]alternative, error) {
	if req.exclusive() {
		return nil, nil
	}
	if len(opts.GPUs) == 0 {
		if req.memMiB == 0 {
			return nil, Errors{{Container: req.container, Resource: string(ResourceMemoryPercentage), Rule: "gpufrac: the cluster publishes no gpufrac GPU with memoryTotalMiB, so a percentage cannot be turned into memory"}}
		}
		if largest, source := v1alpha1.LargestGPU(nil); req.memMiB*mib > largest.Value() {
			return nil, Errors{{Container: req.container, Resource: string(ResourceMemory), Rule: fmt.Sprintf("gpufrac: %d MiB must be at most %s, the largest GPU %s", req.memMiB, largest.String(), source)}}
		}
		return nil, nil
	}
	gpus := slices.Clone(opts.GPUs)
	slices.SortFunc(gpus, func(a, b GPU) int {
		return cmp.Or(cmp.Compare(a.TotalMiB, b.TotalMiB), a.Capacity.Cmp(b.Capacity))
	})
	var alts []alternative
	for _, g := range gpus {
		m := req.memoryOn(g.TotalMiB)
		if m <= 0 || m > g.TotalMiB {
			// Fit: "CardInsufficientMemory" where the device's memory is below
			// the ask; a 0 MiB share is no share gpufrac can allocate.
			continue
		}
		a := alternative{gpu: g, memoryMiB: m}
		if q := resource.NewQuantity(m*mib, resource.BinarySI); q.Cmp(g.Capacity) <= 0 {
			a.ask = q
		}
		alts = append(alts, a)
	}
	if len(alts) == 0 {
		kinds := make([]string, len(gpus))
		for i, g := range gpus {
			kinds[i] = fmt.Sprintf("%d MiB", g.TotalMiB)
		}
		res := ResourceMemory
		if req.memMiB == 0 {
			res = ResourceMemoryPercentage
		}
		return nil, Errors{{Container: req.container, Resource: string(res), Rule: fmt.Sprintf("gpufrac: no GPU the cluster publishes (%s) can hold this ask (HAMi's Fit: device memory below the request)", strings.Join(kinds, ", "))}}
	}
	return alts, nil
}

func exact(class string, count int64, memory *resource.Quantity) *resourceapi.ExactDeviceRequest {
	r := &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: typeGPU}}},
	}
	if memory != nil {
		r.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": *memory}}
	}
	return r
}

// Allocated is what the API server allocates for a memory request on a
// gpufrac GPU under opts' request policy (translated.Allocated).
func Allocated(q resource.Quantity, opts Options) resource.Quantity {
	opts.defaults()
	return translated.Allocated(q, opts.MemoryMin, opts.MemoryStep)
}

// allocatedNote says where the API server allocates more than HAMi's figure.
func allocatedNote(target string, hamiMiB int64, ask resource.Quantity, opts Options) []string {
	got := Allocated(ask, opts)
	if got.Value() == hamiMiB*mib {
		return nil
	}
	return []string{fmt.Sprintf("%s: HAMi %d MiB, the API server allocates %s (request policy min %s, step %s)", target, hamiMiB, got.String(), opts.MemoryMin.String(), opts.MemoryStep.String())}
}
