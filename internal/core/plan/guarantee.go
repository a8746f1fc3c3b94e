// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
)

// One guarantee per claim. The scheduler accounts a claim's memory once;
// the node applies a share's soft and hard limit to the cgroup of each
// container that uses the claim (NVIDIA's limits are per cgroup, and
// every container has its own). A claim used by two containers at once,
// or by two pods, would be guaranteed twice what was accounted, so such a
// claim is refused with the reason: at admission (internal/admission) and at
// Prepare. docs/design/nvidia/memory-limits.md says why no shared limit is used instead.

// SharedClaimError is a claim that more than one container or pod would
// hold at the same time.
type SharedClaimError struct {
	Namespace, Name string
	Holders         []string
}

func (e *SharedClaimError) Error() string {
	return fmt.Sprintf("ResourceClaim %s/%s would give its guaranteed GPU memory to %s at once; gpufrac applies a claim's limits to each container that uses it, "+
		"so the memory the scheduler accounted once would be guaranteed %d times. Give each container its own claim (a ResourceClaimTemplate per pod, one request per container)",
		e.Namespace, e.Name, strings.Join(e.Holders, " and "), len(e.Holders))
}

// ClaimHolders lists who would hold the claim named podClaimName of pod
// at the same time (HoldersOf).
func ClaimHolders(pod *corev1.Pod, podClaimName string) []string {
	var out []string
	for _, h := range HoldersOf(pod, []string{podClaimName}) {
		out = append(out, h.Container)
	}
	return out
}

// Holder is a container that would hold a claim: "container main",
// "sidecar log", "init container warmup", and the pod claim name it uses
// the claim by.
type Holder struct{ Container, As string }

// HoldersOf lists who would hold one claim of pod at the same time, the
// claim the pod names under each of podClaimNames (one claim listed under
// two names is still one claim, prepared once for the pod): the pod's app
// containers and sidecars (restartable init containers) that reference it;
// and a plain init container that references it while a sidecar declared
// before it does, since sidecars keep running while later init containers
// run. Plain init containers run one at a time and end before the app
// containers start, so they do not add up with each other or with the app
// containers. A container that uses the claim under two names holds it
// once.
func HoldersOf(pod *corev1.Pod, podClaimNames []string) []Holder {
	uses := func(c *corev1.Container) string {
		for _, r := range c.Resources.Claims {
			if slices.Contains(podClaimNames, r.Name) {
				return r.Name
			}
		}
		return ""
	}
	var holders []Holder
	sidecarBefore := false
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		as := uses(c)
		if as == "" {
			continue
		}
		sidecar := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		switch {
		case sidecar:
			holders = append(holders, Holder{"sidecar " + c.Name, as})
			sidecarBefore = true
		case sidecarBefore:
			holders = append(holders, Holder{"init container " + c.Name, as})
		}
	}
	for i := range pod.Spec.Containers {
		if as := uses(&pod.Spec.Containers[i]); as != "" {
			holders = append(holders, Holder{"container " + pod.Spec.Containers[i].Name, as})
		}
	}
	return holders
}

// CheckOneGuarantee refuses claim when it is reserved for more than one
// pod, or when one of pods (those it is reserved for, as far as they are
// known) would hand it to more than one container at once.
func CheckOneGuarantee(claim *resourceapi.ResourceClaim, pods []*corev1.Pod) error {
	var reservedPods []string
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			reservedPods = append(reservedPods, "pod "+r.Name)
		}
	}
	if len(reservedPods) > 1 {
		return &SharedClaimError{Namespace: claim.Namespace, Name: claim.Name, Holders: reservedPods}
	}
	for _, pod := range pods {
		// Every name the pod gives this claim: the kubelet prepares the
		// claim once for the pod, whatever the number of names.
		var names []string
		for _, pc := range pod.Spec.ResourceClaims {
			name, _, err := resourceclaim.Name(pod, &pc)
			if err == nil && name != nil && *name == claim.Name {
				names = append(names, pc.Name)
			}
		}
		if holders := HoldersOf(pod, names); len(names) > 0 && len(holders) > 1 {
			list := make([]string, len(holders))
			for i, h := range holders {
				list[i] = h.Container + " of pod " + pod.Name
			}
			return &SharedClaimError{Namespace: claim.Namespace, Name: claim.Name, Holders: list}
		}
	}
	return nil
}
