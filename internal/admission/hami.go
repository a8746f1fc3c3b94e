// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"

	admissionv1 "k8s.io/api/admission/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/translate/hami"
)

// PathMutateHAMiPods is where the webhook of namespaces opted in to HAMi
// translation points: the API server sends only their pods (the
// configuration's namespaceSelector), so the path itself is the opt-in.
const PathMutateHAMiPods = "/mutate-pods-hami"

// HAMiGPUs is what HAMi translation reads from the cluster; a Cluster
// that does not implement it has no GPU kinds known.
type HAMiGPUs interface {
	HAMiGPUs() []hami.GPU
}

// mutateHAMiPod translates HAMi's resources on Pod create. Like
// mutatePod, it only computes its patch: the templates are created by
// gpufrac-controller's loop from the pod the API server accepted.
func (s *Server) mutateHAMiPod(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	pod, done := podOnCreate(req)
	if done != nil {
		return done
	}
	opts := s.HAMi
	if c, ok := s.Cluster.(HAMiGPUs); ok {
		opts.GPUs = c.HAMiGPUs()
	}
	opts.MaxGPUsPerNode = s.Cluster.MaxGPUsPerNode()
	res, err := hami.Translate(pod, opts)
	if err != nil {
		return deny(http.StatusUnprocessableEntity, err.Error())
	}
	if res == nil {
		return allow()
	}
	for _, t := range res.Templates {
		if conflict := s.templateConflict(pod.Namespace, t, "HAMi resources"); conflict != nil {
			return conflict
		}
	}
	after := res.Pod
	warnings := []string{fmt.Sprintf("gpufrac translated HAMi GPU resources into claims from ResourceClaimTemplates %v; nvidia.com/gpu, gpumem, gpumem-percentage, gpucores and priority were removed from the containers (annotation %s)", hami.TemplateNames(after), hami.AnnotationResources)}
	warnings = append(warnings, res.Warnings...)
	warnings = append(warnings, s.stripGPUFracContainers(pod, after)...)
	resp := patchResponse(req.Object.Raw, pod, after, warnings)
	if !resp.Allowed {
		return resp
	}
	klog.FromContext(ctx).V(2).Info("Translated HAMi resources", "pod", klog.KRef(pod.Namespace, podName(pod)), "templates", hami.TemplateNames(after), "dryRun", req.DryRun != nil && *req.DryRun)
	return resp
}

// HAMiGPUs implements HAMiGPUs: the distinct (memoryTotalMiB, capacity)
// kinds of the type=gpu gpufrac devices (a device without type counts as
// gpu); a device without memoryTotalMiB (an older plugin's) is no
// percentage target and is left out.
func (c *InformerCluster) HAMiGPUs() []hami.GPU {
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil
	}
	return GPUKinds(all)
}

// GPUKinds lists the distinct (memoryTotalMiB, capacity) kinds of the
// whole GPUs in slices, smallest first.
func GPUKinds(all []*resourceapi.ResourceSlice) []hami.GPU {
	var out []hami.GPU
	for _, s := range all {
		if s.Spec.Driver != v1alpha1.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			if t, ok := d.Attributes[resourceslices.AttrType]; ok && (t.StringValue == nil || *t.StringValue != "gpu") {
				continue
			}
			total, ok := d.Attributes[resourceslices.AttrMemoryTotalMiB]
			capacity, hasCap := d.Capacity[resourceslices.MemoryCapacity]
			if !ok || total.IntValue == nil || !hasCap {
				continue
			}
			g := hami.GPU{TotalMiB: *total.IntValue, Capacity: capacity.Value}
			if !slices.ContainsFunc(out, func(o hami.GPU) bool { return o.TotalMiB == g.TotalMiB && o.Capacity.Cmp(g.Capacity) == 0 }) {
				out = append(out, g)
			}
		}
	}
	slices.SortFunc(out, func(a, b hami.GPU) int {
		return cmp.Or(cmp.Compare(a.TotalMiB, b.TotalMiB), a.Capacity.Cmp(b.Capacity))
	})
	return out
}
