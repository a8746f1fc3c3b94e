// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// patchOp is one RFC 6902 operation.
type patchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// rawPod records which of the fields a translation touches are present in
// the pod as the API server sent it: a JSON patch must "add" a missing
// parent before its members, and a typed round trip cannot tell "absent"
// from "empty". Nothing else of the pod is decoded, so fields this module's
// k8s.io/api does not know are never rewritten.
type rawPod struct {
	Metadata struct {
		Annotations map[string]json.RawMessage `json:"annotations"`
		Labels      map[string]json.RawMessage `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		ResourceClaims []json.RawMessage `json:"resourceClaims"`
		InitContainers []rawContainer    `json:"initContainers"`
		Containers     []rawContainer    `json:"containers"`
		SchedulerName  *string           `json:"schedulerName"`
	} `json:"spec"`
}

type rawContainer struct {
	Resources *struct {
		Claims   []json.RawMessage          `json:"claims"`
		Limits   map[string]json.RawMessage `json:"limits"`
		Requests map[string]json.RawMessage `json:"requests"`
	} `json:"resources"`
}

// podPatch returns the operations that turn the admitted pod (raw, decoded
// as before) into after, for the fields a translation changes: annotations,
// labels, resourceClaims, each container's claims and env, schedulerName.
func podPatch(raw []byte, before, after *corev1.Pod) ([]patchOp, error) {
	var r rawPod
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("reading the pod: %w", err)
	}
	var ops []patchOp
	ops = append(ops, mapOps("/metadata/annotations", r.Metadata.Annotations != nil, before.Annotations, after.Annotations)...)
	ops = append(ops, mapOps("/metadata/labels", r.Metadata.Labels != nil, before.Labels, after.Labels)...)

	if added := after.Spec.ResourceClaims[len(before.Spec.ResourceClaims):]; len(added) > 0 {
		if r.Spec.ResourceClaims == nil {
			ops = append(ops, patchOp{Op: "add", Path: "/spec/resourceClaims", Value: added})
		} else {
			for _, c := range added {
				ops = append(ops, patchOp{Op: "add", Path: "/spec/resourceClaims/-", Value: c})
			}
		}
	}
	for _, group := range []struct {
		path          string
		raw           []rawContainer
		before, after []corev1.Container
	}{
		{"/spec/initContainers", r.Spec.InitContainers, before.Spec.InitContainers, after.Spec.InitContainers},
		{"/spec/containers", r.Spec.Containers, before.Spec.Containers, after.Spec.Containers},
	} {
		for i := range group.after {
			b, a := &group.before[i], &group.after[i]
			base := fmt.Sprintf("%s/%d", group.path, i)
			if added := a.Resources.Claims[len(b.Resources.Claims):]; len(added) > 0 {
				switch rc := group.raw[i].Resources; {
				case rc == nil:
					ops = append(ops, patchOp{Op: "add", Path: base + "/resources", Value: map[string]any{"claims": added}})
				case rc.Claims == nil:
					ops = append(ops, patchOp{Op: "add", Path: base + "/resources/claims", Value: added})
				default:
					for _, c := range added {
						ops = append(ops, patchOp{Op: "add", Path: base + "/resources/claims/-", Value: c})
					}
				}
			}
			ops = append(ops, removedResources(base, group.raw[i], b, a)...)
			// Removed variables, last first so indices stay valid.
			kept := map[string]bool{}
			for _, e := range a.Env {
				kept[e.Name] = true
			}
			for j := len(b.Env) - 1; j >= 0; j-- {
				if !kept[b.Env[j].Name] {
					ops = append(ops, patchOp{Op: "remove", Path: fmt.Sprintf("%s/env/%d", base, j)})
				}
			}
		}
	}
	if before.Spec.SchedulerName != after.Spec.SchedulerName {
		op := "replace"
		if r.Spec.SchedulerName == nil {
			op = "add"
		}
		ops = append(ops, patchOp{Op: op, Path: "/spec/schedulerName", Value: after.Spec.SchedulerName})
	}
	return ops, nil
}

// removedResources removes the requests and limits a translation took
// out of a container (HAMi's resources), present in the raw pod.
func removedResources(base string, raw rawContainer, before, after *corev1.Container) []patchOp {
	if raw.Resources == nil {
		return nil
	}
	var ops []patchOp
	for _, l := range []struct {
		field         string
		raw           map[string]json.RawMessage
		before, after corev1.ResourceList
	}{
		{"limits", raw.Resources.Limits, before.Resources.Limits, after.Resources.Limits},
		{"requests", raw.Resources.Requests, before.Resources.Requests, after.Resources.Requests},
	} {
		for _, name := range slices.Sorted(maps.Keys(l.before)) {
			if _, kept := l.after[name]; kept {
				continue
			}
			if _, ok := l.raw[string(name)]; ok {
				ops = append(ops, patchOp{Op: "remove", Path: base + "/resources/" + l.field + "/" + escapePointer(string(name))})
			}
		}
	}
	return ops
}

// mapOps adds or changes the keys of after that before lacks or differs in.
func mapOps(path string, present bool, before, after map[string]string) []patchOp {
	changed := map[string]string{}
	for k, v := range after {
		if old, ok := before[k]; !ok || old != v {
			changed[k] = v
		}
	}
	if len(changed) == 0 {
		return nil
	}
	if !present {
		return []patchOp{{Op: "add", Path: path, Value: changed}}
	}
	var ops []patchOp
	for _, k := range slices.Sorted(maps.Keys(changed)) {
		// "add" replaces an existing member, so it serves both cases.
		ops = append(ops, patchOp{Op: "add", Path: path + "/" + escapePointer(k), Value: changed[k]})
	}
	return ops
}

// escapePointer escapes a JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
