// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai_test

import (
	"math"
	"strconv"
	"strings"
)

// kaiModel is an independent transcription of KAI-Scheduler's admission of a
// pod created by a user, written from KAI's source (not from internal/translate/kai) as a
// short list of rules over a parsed view of the annotations:
//
//   - Mutate, pkg/admission/webhook/v1alpha2/nvfractions (KAI-Scheduler):
//     RequestsGPUFraction, GetFractionContainerRef, then gpu-memory copied to
//     nvidia.com/container.<target>.gpu-memory.request as "<N>Mi";
//   - Validate, same plugin: binder-owned keys refused for users, then
//     resources.ValidateGPUFractionRequest (gpu_sharing_validation.go), which
//     calls ParsePodGPUFractionRequest (gpu_sharing.go) and
//     ExtractNvFractionsData (gpu_sharing_nvfractions.go).
//
// It answers only the decision (admit or refuse) and the container that
// gets the GPU; the cross-check compares both with internal/translate/kai.
type kaiModel struct {
	ann        map[string]string
	containers []string // regular containers, in order
	inits      []string
	gpuLimit   bool // some container has an nvidia.com/gpu limit
}

// nvKey is one nvidia.com/container.* key as KAI parses it.
type nvKey struct{ container, kind string }

func (m kaiModel) has(c string) bool {
	for _, n := range append(append([]string{}, m.containers...), m.inits...) {
		if n == c {
			return true
		}
	}
	return false
}

// parseNv: KAI tries the suffixes in this order on the whole key.
func parseNv(key string) (nvKey, bool) {
	body := key[len("nvidia.com/container."):]
	for _, kind := range []string{".gpu-memory.request", ".gpu-memory.limit", ".gpus.devices", ".gpu-compute.mode", ".gpu-compute.portion", ".gpu-compute.request"} {
		if strings.HasSuffix(key, kind) {
			c := strings.TrimSuffix(body, kind)
			return nvKey{c, kind}, c != ""
		}
	}
	return nvKey{}, false
}

// decide returns whether KAI admits the pod and, if it asks for a
// fraction, the container that gets it ("" when nothing is requested).
func (m kaiModel) decide() (admit bool, target string) {
	ann := map[string]string{}
	for k, v := range m.ann {
		ann[k] = v
	}
	nv := map[string]nvKey{}
	names := map[string]bool{}
	badKey := false
	for k := range ann {
		if !strings.HasPrefix(k, "nvidia.com/container.") {
			continue
		}
		p, ok := parseNv(k)
		if !ok {
			badKey = true
			continue
		}
		nv[k] = p
		names[p.container] = true
	}
	requests := false
	_, hasFraction := ann["gpu-fraction"]
	_, hasMemory := ann["gpu-memory"]
	for _, p := range nv {
		if p.kind == ".gpu-memory.request" || p.kind == ".gpu-memory.limit" {
			requests = true
		}
	}
	requests = requests || hasFraction || hasMemory

	// --- Mutate ---
	if len(m.containers) > 0 && requests {
		if badKey || len(names) > 1 {
			return false, ""
		}
		nvName := ""
		for n := range names {
			nvName = n
		}
		cn, hasCN := ann["gpu-fraction-container-name"]
		switch {
		case hasCN && nvName != "" && cn != nvName:
			return false, ""
		case nvName != "":
			target = nvName
		case hasCN:
			target = cn
		default:
			target = m.containers[0]
		}
		if !m.has(target) {
			return false, ""
		}
		if v, ok := ann["gpu-memory"]; ok {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return false, ""
			}
			k := "nvidia.com/container." + target + ".gpu-memory.request"
			ann[k] = strconv.FormatUint(n, 10) + "Mi"
			nv[k] = nvKey{target, ".gpu-memory.request"}
		}
	}

	// --- Validate: binder-owned keys, written by a user ---
	for k, p := range nv {
		if p.kind == ".gpus.devices" || p.kind == ".gpu-compute.portion" {
			return false, ""
		}
		_ = k
	}

	// --- validateGpuMemoryPortionLimitAnnotation ---
	for k, v := range ann {
		if !strings.HasPrefix(k, "kai.scheduler/container.") || !strings.HasSuffix(k, ".gpu-memory.portion.limit") {
			continue
		}
		c := strings.TrimSuffix(strings.TrimPrefix(k, "kai.scheduler/container."), ".gpu-memory.portion.limit")
		f := ann["gpu-fraction"]
		if f == "" {
			return false, ""
		}
		if cn, ok := ann["gpu-fraction-container-name"]; ok {
			if cn != c {
				return false, ""
			}
		} else if len(m.containers) == 0 || m.containers[0] != c {
			return false, ""
		}
		fv, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return false, ""
		}
		if i := strings.Index(v, "."); i >= 0 && len(v)-i-1 > 5 {
			return false, ""
		}
		pv, err := strconv.ParseFloat(v, 64)
		if err != nil || pv <= 0 || pv >= 1 || pv <= fv {
			return false, ""
		}
		break
	}

	// --- ParsePodGPUFractionRequest ---
	if v, ok := ann["gpu-fraction-num-devices"]; ok {
		if n, err := strconv.ParseInt(v, 10, 64); err != nil || n <= 0 {
			return false, ""
		}
	}
	if badKey {
		return false, ""
	}
	type data struct{ req, lim *float64 }
	per := map[string]*data{}
	quantity := func(s string) (float64, bool) { // the few quantities the generator uses
		switch s {
		case "512Mi":
			return 512, true
		case "1Gi", "1024Mi":
			return 1024, true
		case "2Gi", "2048Mi":
			return 2048, true
		}
		if strings.HasSuffix(s, "Mi") {
			n, err := strconv.ParseUint(strings.TrimSuffix(s, "Mi"), 10, 64)
			return float64(n), err == nil && n > 0
		}
		return 0, false
	}
	for k, p := range nv {
		v := ann[k]
		d := per[p.container]
		if d == nil {
			d = &data{}
			per[p.container] = d
		}
		switch p.kind {
		case ".gpu-compute.mode":
			if v != "time-slicing" && v != "sm-sharing" {
				return false, ""
			}
		case ".gpu-compute.request":
			c, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(c) || c <= 0 || c > 1 {
				return false, ""
			}
		case ".gpu-memory.request", ".gpu-memory.limit":
			q, ok := quantity(v)
			if !ok {
				return false, ""
			}
			if p.kind == ".gpu-memory.request" {
				d.req = &q
			} else {
				d.lim = &q
			}
		}
	}
	nvRequest := ""
	for c, d := range per {
		if d.req != nil || d.lim != nil {
			nvRequest = c
		}
	}
	fraction, memory := ann["gpu-fraction"], ann["gpu-memory"]
	switch {
	case nvRequest != "":
	case fraction != "":
		f, err := strconv.ParseFloat(fraction, 64)
		if err != nil || !(f > 0 && f < 1) {
			return false, ""
		}
	case memory != "":
		if n, err := strconv.ParseUint(memory, 10, 64); err != nil || n == 0 {
			return false, ""
		}
	default:
		_, hasCount := ann["gpu-fraction-num-devices"]
		return !hasCount, ""
	}

	// --- the rest of ValidateGPUFractionRequest ---
	if nvRequest != "" {
		for c, d := range per {
			if !m.has(c) {
				return false, ""
			}
			if d.req != nil && d.lim != nil && *d.req > *d.lim {
				return false, ""
			}
		}
		if len(per) > 1 {
			return false, ""
		}
		if cn, ok := ann["gpu-fraction-container-name"]; ok && cn != nvRequest {
			return false, ""
		}
	}
	if m.gpuLimit {
		return false, ""
	}
	if nvRequest != "" && per[nvRequest].lim != nil && (fraction != "" || memory != "") {
		return false, ""
	}
	if fraction != "" && memory != "" {
		return false, ""
	}
	if nvRequest != "" && memory != "" {
		if n, err := strconv.ParseUint(memory, 10, 64); err == nil && n > 0 {
			d := per[nvRequest]
			got := d.lim
			if d.req != nil {
				got = d.req
			}
			if *got != float64(n) {
				return false, ""
			}
		}
	}
	return true, target
}
