// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// Compare describes, side by side, what KAI-Scheduler would do with the pod
// (its admission, then what its binder and kai-gpu-fractioning set) and what
// gpufrac does (Translate). It shares the admission transcription with
// Translate, so it shows the consequences of a decision, not a second
// opinion on it; the decision itself is cross-checked in the tests.
func Compare(pod *corev1.Pod, opts Options) []translated.Row {
	opts.defaults()
	res, terr := Translate(pod, opts)
	req, kerr := admit(pod)
	var rows []translated.Row
	add := func(aspect, k, g string) { rows = append(rows, translated.Row{Aspect: aspect, Theirs: k, Gpufrac: g}) }

	kaiAdmission, gAdmission := admissions(req, kerr, res, terr)
	add("admission", kaiAdmission, gAdmission)
	if req == nil || kerr != nil || terr != nil || res == nil {
		return rows
	}
	add("container", req.container, req.container)
	scheduler := res.Pod.Spec.SchedulerName
	if scheduler == "" {
		scheduler = corev1.DefaultSchedulerName
	}
	add("scheduler", "kai-scheduler (reservation pod, binder annotations)", scheduler+" (DRA claim from template "+res.Template.Name+")")
	mode := modeOf(pod, req)
	add("compute mode", mode, mode)
	add("devices", fmt.Sprint(req.count), fmt.Sprint(req.count))

	// gpufrac's side, per alternative, read back from the template.
	g := gpufracSides(res.Template.Spec.Spec, opts, mode)

	if req.kind == kindPortion {
		// Both sides compute from the portion as KAI's scheduler hands it
		// to its binder (binder.go).
		_, text := receivedPortion(req.portion)
		add("portion KAI's binder receives (%.2f)", text, text)
	}
	// KAI's side: its binder's figures for each GPU size gpufrac knows.
	sizes := opts.gpuSizes()
	if len(g) == 1 && g[""] != (gpufracSide{}) {
		sizes = []gpuSize{{}}
	}
	for _, size := range sizes {
		label, key := "any GPU", ""
		if !size.capacity.IsZero() {
			label, key = fmt.Sprintf("%s GPU (%d MiB total)", size.capacity.String(), size.totalMiB), lower(size.capacity)
		}
		gs, ok := g[key]
		if !ok {
			gs = gpufracSide{memory: "does not fit", limit: "-", sm: "-"}
		}
		ks := kaiOn(size, req, opts)
		switch {
		case !ok || ks.mib == 0:
		case ks.mib*mib > size.capacity.Value():
			gs.memory += fmt.Sprintf(": KAI's figure is more than this GPU's capacity, so the claim asks the whole GPU, %dMi less than KAI", ks.mib-size.capacity.Value()/mib)
		case !strings.HasPrefix(gs.memory, ks.memory+" ") && gs.memory != ks.memory:
			gs.memory += fmt.Sprintf(" (KAI's %s rounded up to the step)", ks.memory)
		}
		add("memory request, "+label, ks.memory, gs.memory)
		add("memory limit, "+label, ks.limit, gs.limit)
		add("SM cap, "+label, ks.sm, gs.sm)
	}
	return rows
}

// admissions is each side's admission verdict: refused (and why), admitted
// with nothing to do, or admitted.
func admissions(req *request, kerr *Error, res *Result, terr error) (kaiAdmission, gAdmission string) {
	kaiAdmission = "admitted"
	switch {
	case kerr != nil:
		kaiAdmission = "refused: " + kerr.Error()
	case req == nil:
		kaiAdmission = "admitted, no fractional GPU request"
	case req.kind == kindPortion:
		if v, text := receivedPortion(req.portion); v <= 0 {
			kaiAdmission = fmt.Sprintf("admitted; then its binder fails every bind: %s %q", binderReason, text)
		}
	}
	gAdmission = "admitted"
	switch {
	case terr != nil:
		gAdmission = "refused: " + strings.TrimPrefix(terr.Error(), "cannot translate KAI GPU-sharing annotations: ")
	case res == nil:
		gAdmission = "admitted, nothing to translate"
		if req == nil {
			gAdmission = "admitted, no fractional GPU request"
		}
	}
	return kaiAdmission, gAdmission
}

// gpufracSide is what gpufrac sets for one alternative of a claim.
type gpufracSide struct{ memory, limit, sm string }

// gpufracSides reads gpufrac's side back from the claim spec of the
// template, per GPU size ("" for an exact request): the memory the API
// server allocates (opts.MemoryMin and MemoryStep), the configured limit
// and SM cap.
func gpufracSides(spec resourceapi.ResourceClaimSpec, opts Options, mode string) map[string]gpufracSide {
	g := map[string]gpufracSide{}
	configs := map[string]v1alpha1.FractionConfig{}
	for _, c := range spec.Devices.Config {
		var fc v1alpha1.FractionConfig
		_ = json.Unmarshal(c.Opaque.Parameters.Raw, &fc)
		for _, r := range c.Requests {
			configs[r] = fc
		}
	}
	describe := func(target string, memory resource.Quantity) gpufracSide {
		s := gpufracSide{memory: allocatedText(memory, opts), limit: "= request", sm: "none"}
		if fc, ok := configs[target]; ok {
			if fc.MemoryLimit != nil {
				s.limit = fc.MemoryLimit.String()
			}
			if fc.ActiveThreadPercentage != nil {
				s.sm = fmt.Sprintf("%d%% (MPS namespace)", *fc.ActiveThreadPercentage)
			}
		}
		if mode == "time-slicing" {
			s.sm = "none (TimeSlicing shares get no MPS thread percentage)"
		}
		return s
	}
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			g[""] = describe(RequestName, r.Exactly.Capacity.Requests["memory"])
		}
		for _, sub := range r.FirstAvailable {
			size := strings.TrimPrefix(sub.Name, "size-")
			g[size] = describe(RequestName+"/"+sub.Name, sub.Capacity.Requests["memory"])
		}
	}
	return g
}

type kaiSide struct {
	memory, limit, sm string
	mib               int64 // KAI's memory in MiB, where it computes one
}

// kaiOn is what KAI's binder and kai-gpu-fractioning's fractiond set for
// the request on a GPU of the given size (zero: an exact request), from
// the portion the binder receives (binder.go).
func kaiOn(size gpuSize, req *request, opts Options) kaiSide {
	usable := int64(0)
	if size.totalMiB > 0 {
		usable = size.totalMiB - opts.ReservedMiB
	}
	out := kaiSide{memory: req.memory.String(), limit: "= request"}
	if req.kind == kindPortion {
		v, text := receivedPortion(req.portion)
		switch m := binderMiB(usable, v); {
		case v <= 0:
			out.memory = fmt.Sprintf("bind fails: %s %q", binderReason, text)
		case m == 0:
			out.memory = "bind fails: calculated gpu memory request is zero"
		default:
			out.mib = m
			out.memory = resource.NewQuantity(m*mib, resource.BinarySI).String()
		}
	}
	switch {
	case req.limit != nil:
		out.limit = req.limit.String()
	case req.portionLimit > 0 && usable > 0:
		out.limit = resource.NewQuantity(binderMiB(usable, req.portionLimit)*mib, resource.BinarySI).String()
	}
	if portion := computePortion(req, size); portion > 0 {
		out.sm = fmt.Sprintf("%d%% (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, both modes)", percentOf(portion))
	} else {
		out.sm = "the memory request's portion of the GPU, at bind time (both modes)"
	}
	return out
}

// allocatedText is what the API server allocates for a request of q, and
// why where that is more than q.
func allocatedText(q resource.Quantity, opts Options) string {
	got := translated.Allocated(q, opts.MemoryMin, opts.MemoryStep)
	if got.Cmp(q) == 0 {
		return q.String()
	}
	return fmt.Sprintf("%s (the API server rounds %s up to min %s, step %s)", got.String(), q.String(), opts.MemoryMin.String(), opts.MemoryStep.String())
}
