// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hami

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// Compare describes, side by side, what HAMi would give the pod (its
// webhook, then its scheduler's Fit on each kind of GPU) and what gpufrac
// does (Translate); a row's Theirs column holds HAMi's side.
func Compare(pod *corev1.Pod, opts Options) []translated.Row {
	opts.defaults()
	res, terr := Translate(pod, opts)
	var rows []translated.Row
	add := func(aspect, h, g string) { rows = append(rows, translated.Row{Aspect: aspect, Theirs: h, Gpufrac: g}) }
	reqs, herr := admit(pod)
	hAdmission, gAdmission := "admitted", "admitted"
	switch {
	case !forHAMi(pod, opts):
		hAdmission = "left alone: schedulerName " + pod.Spec.SchedulerName + " is not HAMi's"
	case herr != nil:
		hAdmission = "refused: " + herr.Error()
	case len(reqs) == 0:
		hAdmission = "admitted, no GPU request"
	}
	switch {
	case terr != nil:
		gAdmission = "refused: " + strings.TrimPrefix(terr.Error(), "cannot translate HAMi GPU resources: ")
	case res == nil:
		gAdmission = "admitted, nothing to translate"
	}
	add("admission", hAdmission, gAdmission)
	if res == nil || herr != nil {
		return rows
	}
	add("scheduler", "hami-scheduler (extender, HAMi-core in the container)", res.Pod.Spec.SchedulerName+" (DRA claims)")
	for i := range reqs {
		r := &reqs[i]
		tmpl := res.Templates[i]
		c := "container " + r.container + ": "
		add(c+"GPUs", fmt.Sprint(r.count), fmt.Sprint(r.count))
		add(c+"claim template", "-", tmpl.Name)
		add(c+"gpucores", coresHAMi(r), coresGpufrac(r))
		if r.exclusive() {
			add(c+"memory", "the GPU alone; memory "+hamiMemory(r), "the whole capacity of the GPU (no share beside it)")
			continue
		}
		alts, _ := alternatives(r, opts)
		if alts == nil {
			q := *resource.NewQuantity(r.memMiB*mib, resource.BinarySI)
			got := Allocated(q, opts)
			add(c+"memory, any GPU", fmt.Sprintf("%d MiB", r.memMiB), got.String())
			continue
		}
		for _, a := range alts {
			g := "the whole capacity, " + a.gpu.Capacity.String()
			if a.ask != nil {
				got := Allocated(*a.ask, opts)
				g = got.String()
			}
			add(fmt.Sprintf("%smemory, %d MiB GPU", c, a.gpu.TotalMiB), fmt.Sprintf("%d MiB", a.memoryMiB), g)
		}
	}
	return rows
}

func hamiMemory(r *request) string {
	switch {
	case r.memMiB > 0:
		return fmt.Sprintf("capped at %d MiB", r.memMiB)
	case r.percent < 100:
		return fmt.Sprintf("capped at %d%%", r.percent)
	}
	return "all of it"
}

func coresHAMi(r *request) string {
	switch {
	case r.exclusive():
		return "100 (exclusive)"
	case r.cores == 0:
		return "0 (no cap)"
	}
	return fmt.Sprintf("%d%% (HAMi-core throttle)", r.cores)
}

func coresGpufrac(r *request) string {
	switch {
	case r.exclusive():
		return "exclusive (whole capacity)"
	case r.cores == 0:
		return "no cap"
	}
	return "no cap (TimeSlicing: not enforced)"
}
