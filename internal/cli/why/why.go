// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package why explains, for people, why a pod's gpufrac claims are where
// they are, or why they are nowhere: for a Pending pod it replays the
// scheduler's own allocator (k8s.io/dynamic-resource-allocation/structured,
// the code kube-scheduler runs) over the cluster's slices and allocated
// claims, names per node what keeps the claims out (not enough free
// guaranteed memory on any GPU, fragmentation, a DeviceClass or claim
// selector, a device taint, a node that cannot enforce the config) and
// replays variants to say what would make them fit (a smaller request that
// fits now; the GPU that would fit after named pods leave). For a pod whose
// claims are allocated it lists each share with its request, limit,
// enforcement, compute mode, MPS route and memory in use.
//
// It is a pure function of a Snapshot (objects the caller could read) and a
// Target (the pod and its claims); `kubectl gpufrac why` feeds it live
// objects and tests feed it constructed clusters.
package why

import (
	"context"
	"fmt"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// Snapshot is what the caller could see of the cluster.
type Snapshot struct {
	// Nodes, when visible, restrict a Pending pod to the nodes its node
	// selector and required affinity allow; nil means every node that
	// publishes a pool is a candidate (Unseen should say so).
	Nodes   []*v1.Node
	Slices  []*resourceapi.ResourceSlice
	Classes []*resourceapi.DeviceClass
	// Claims are every claim the caller could read: the allocated ones
	// hold GPU memory that a new claim cannot have.
	Claims []*resourceapi.ResourceClaim
	// Usage is the memory in use per container, from the plugin's metrics.
	Usage []ContainerUsage
	// Unseen says what the caller could not read (RBAC, unreachable
	// metrics), so the explanation can say what it may be missing.
	Unseen []string
}

// Target is what to explain: a pod with its claims, or claims alone.
type Target struct {
	Pod    *v1.Pod
	Claims []*resourceapi.ResourceClaim
	// Missing are claims the pod names that do not exist (yet).
	Missing []string
}

// Code classifies a reason.
type Code string

// The reasons `why` gives.
const (
	// NoGPUs: the node publishes no gpufrac device (or no pool at all).
	NoGPUs Code = "NoGPUs"
	// SelectorExcludes: every GPU of the node fails a DeviceClass or claim
	// CEL selector of the request.
	SelectorExcludes Code = "SelectorExcludes"
	// Tainted: the GPUs the selectors allow carry taints the request does
	// not tolerate.
	Tainted Code = "Tainted"
	// NotEnoughMemory: no GPU has the free guaranteed memory the request
	// needs, and all GPUs together do not either.
	NotEnoughMemory Code = "NotEnoughMemory"
	// Fragmented: the GPUs together have enough free memory, no single
	// one does; a share cannot span GPUs.
	Fragmented Code = "Fragmented"
	// Combination: each request fits alone, not all of them together
	// (constraints, or the pod's requests compete for the same GPUs).
	Combination Code = "Combination"
	// NodeRefuses: the allocator places the claims here, but the node's
	// plugin refuses to prepare them (a limit the node cannot enforce, a
	// compute mode its GPUs do not serve): the pod would be scheduled and
	// never start.
	NodeRefuses Code = "NodeRefuses"
	// NodeExcluded: the pod's node selector, affinity or nodeName rule the
	// node out before its GPUs matter.
	NodeExcluded Code = "NodeExcluded"
)

// Explanation is the answer.
type Explanation struct {
	Pod     string   `json:"pod,omitempty"`
	Phase   string   `json:"phase,omitempty"`
	Node    string   `json:"node,omitempty"`
	Claims  []string `json:"claims"`
	Summary string   `json:"summary"`
	// FitsOn are the nodes where the allocator places the unallocated
	// claims now (and their plugin would prepare them).
	FitsOn      []string     `json:"fitsOn,omitempty"`
	Nodes       []NodeResult `json:"nodes,omitempty"`
	Suggestions []Suggestion `json:"suggestions,omitempty"`
	// Blocked says, for claims that memory keeps out of every node,
	// whether the GPUs they may use are fragmented or full.
	Blocked *Blocked `json:"blocked,omitempty"`
	// Shares are the allocated shares of the claims.
	Shares []Share `json:"shares,omitempty"`
	// Problems are reasons allocated claims cannot be prepared.
	Problems []Reason `json:"problems,omitempty"`
	Unseen   []string `json:"unseen,omitempty"`
}

// NodeResult is one node's verdict for the unallocated claims.
type NodeResult struct {
	Node    string   `json:"node"`
	Fits    bool     `json:"fits"`
	Reasons []Reason `json:"reasons,omitempty"`
	GPUs    []GPU    `json:"gpus,omitempty"`
}

// Reason is one thing that keeps claims out of a node.
type Reason struct {
	Code    Code   `json:"code"`
	Claim   string `json:"claim,omitempty"`
	Request string `json:"request,omitempty"`
	Message string `json:"message"`
}

// GPU is one GPU of a node as a request sees it.
type GPU struct {
	Device      string `json:"device"`
	Model       string `json:"model,omitempty"`
	Enforcement string `json:"memoryEnforcement,omitempty"`
	MemoryBytes int64  `json:"memoryBytes"`
	FreeBytes   int64  `json:"freeBytes"`
	// ServerReserveBytes is kept back beyond MemoryBytes for the MPS
	// server's context (the slice's mpsServerReserveMiB); 0 where none.
	ServerReserveBytes int64 `json:"serverReserveBytes,omitempty"`
	// ExcludedBy names the selector or taint that rules it out for the
	// first request it does not serve; empty when every request may use it.
	ExcludedBy string `json:"excludedBy,omitempty"`
}

// Suggestion is a change that the allocator confirmed would make the
// claims fit.
type Suggestion struct {
	Kind    string `json:"kind"` // SmallerRequest or AfterPodsLeave
	Claim   string `json:"claim"`
	Request string `json:"request"`
	Node    string `json:"node"`
	Device  string `json:"device,omitempty"`
	// RequestBytes is the largest request that fits now (SmallerRequest).
	RequestBytes int64 `json:"requestBytes,omitempty"`
	// Pods and Claims are what would have to leave (AfterPodsLeave).
	Pods    []string `json:"pods,omitempty"`
	Leaving []string `json:"claimsLeaving,omitempty"`
	Message string   `json:"message"`
}

// Share is one allocated share of a claim.
type Share struct {
	Claim        string `json:"claim"`
	Request      string `json:"request"`
	Node         string `json:"node"`
	Device       string `json:"device"`
	UUID         string `json:"uuid,omitempty"`
	Model        string `json:"model,omitempty"`
	RequestBytes int64  `json:"requestBytes"`
	LimitBytes   int64  `json:"limitBytes,omitempty"`
	ComputeMode  string `json:"computeMode,omitempty"`
	Enforcement  string `json:"enforcement,omitempty"`
	MPSServer    string `json:"mpsServer,omitempty"`
	Prepared     bool   `json:"prepared"`
	// Conditions are the plugin's conditions on the share, one line each.
	Conditions []string `json:"conditions,omitempty"`
	// Usage is the memory in use of the containers on this share.
	Usage []ContainerUsage `json:"usage,omitempty"`
}

// ContainerUsage is one container's GPU memory in use on one GPU.
type ContainerUsage struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	ClaimUID  string `json:"claimUID"`
	GPUUUID   string `json:"gpuUUID"`
	UsedBytes int64  `json:"usedBytes"`
}

// Explain answers for target in snap.
func Explain(ctx context.Context, snap Snapshot, target Target) (*Explanation, error) {
	out := &Explanation{Unseen: snap.Unseen}
	if p := target.Pod; p != nil {
		out.Pod = p.Namespace + "/" + p.Name
		out.Phase = string(p.Status.Phase)
		out.Node = p.Spec.NodeName
	}
	var pending []*resourceapi.ResourceClaim
	for _, c := range target.Claims {
		out.Claims = append(out.Claims, c.Namespace+"/"+c.Name)
		if c.Status.Allocation == nil {
			pending = append(pending, c)
		}
	}
	for _, m := range target.Missing {
		out.Claims = append(out.Claims, m+" (not created yet)")
	}
	w := newWorld(snap, target.Claims)
	shares, problems := w.shares(ctx, target)
	out.Shares, out.Problems = shares, problems
	if len(pending) > 0 {
		if err := w.explainPending(ctx, target.Pod, pending, out); err != nil {
			return nil, err
		}
	}
	out.Summary = summary(out, target, pending)
	return out, nil
}

func summary(out *Explanation, target Target, pending []*resourceapi.ResourceClaim) string {
	switch {
	case len(target.Claims) == 0 && len(target.Missing) > 0:
		return fmt.Sprintf("the pod's claims %v do not exist yet: the resourceclaim controller creates them from their templates", target.Missing)
	case len(target.Claims) == 0:
		return "the pod has no ResourceClaims"
	case len(pending) > 0 && len(out.FitsOn) > 0:
		return fmt.Sprintf("the claims fit now on %v; the scheduler places the pod at its next attempt (if the pod stays Pending, something other than its GPU claims keeps it out)", out.FitsOn)
	case len(pending) > 0 && out.Blocked != nil:
		return "the claims fit on no node, " + out.Blocked.Message + ": " + commonReason(out.Nodes)
	case len(pending) > 0:
		return "the claims fit on no node: " + commonReason(out.Nodes)
	case len(out.Problems) > 0:
		return "the claims are allocated, but the node's plugin refuses to prepare them: " + out.Problems[0].Message
	}
	for _, s := range out.Shares {
		if !s.Prepared {
			return "the claims are allocated; the node's plugin has not prepared every share yet"
		}
	}
	return "the claims are allocated and prepared"
}

// commonReason is the reason most nodes give, with how many give it.
func commonReason(nodes []NodeResult) string {
	count := map[Code]int{}
	first := map[Code]string{}
	for _, n := range nodes {
		seen := map[Code]bool{}
		for _, r := range n.Reasons {
			if !seen[r.Code] {
				seen[r.Code] = true
				count[r.Code]++
				if first[r.Code] == "" {
					first[r.Code] = n.Node + ": " + r.Message
				}
			}
		}
	}
	if len(count) == 0 {
		return "no node publishes gpufrac GPUs"
	}
	codes := make([]Code, 0, len(count))
	for c := range count {
		codes = append(codes, c)
	}
	sort.Slice(codes, func(i, j int) bool {
		if count[codes[i]] != count[codes[j]] {
			return count[codes[i]] > count[codes[j]]
		}
		return codes[i] < codes[j]
	})
	c := codes[0]
	if c == NodeExcluded && len(codes) > 1 {
		// The nodes the pod may use say more than the ones it may not.
		c = codes[1]
	}
	return fmt.Sprintf("%s on %d of %d nodes (%s)", c, count[c], len(nodes), first[c])
}
