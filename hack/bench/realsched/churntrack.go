// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// starveAfter is how long a pod may stay Pending while some GPU has room
// for it before the churn benchmark counts it (the 10 s).
const starveAfter = 10 * time.Second

// churnTracker follows the namespace's pods and claims from informers
// during a churn phase: when each pod was created and bound, which GPUs
// its claims hold, and which pods waited with room free.
type churnTracker struct {
	pods, claims cache.SharedIndexInformer
	gpuMemory    int64
	// capacity of every GPU of the slices, by pool/device.
	capacity map[string]int64
	// need is what a claim of each template consumes: learned from
	// allocations (the slice's requestPolicy may round a request up),
	// the template's own request until one is seen.
	need map[string]int64

	mu       sync.Mutex
	created  map[string]time.Time
	bound    map[string]time.Time
	departed map[string]bool
	starved  map[string]bool
	changed  time.Time
}

func newChurnTracker(b *bench, capacity map[string]int64, gpuMemory int64) *churnTracker {
	factory := informers.NewSharedInformerFactoryWithOptions(b.client, 0, informers.WithNamespace(namespace))
	t := &churnTracker{
		pods: factory.Core().V1().Pods().Informer(), claims: factory.Resource().V1().ResourceClaims().Informer(),
		gpuMemory: gpuMemory, capacity: capacity, need: map[string]int64{},
		created: map[string]time.Time{}, bound: map[string]time.Time{}, departed: map[string]bool{}, starved: map[string]bool{},
	}
	for _, tmpl := range b.wl.templates {
		t.need[tmpl.Name] = requestOf(&tmpl.Spec.Spec, gpuMemory)
	}
	return t
}

// requestOf is the memory a claim spec asks of one GPU: the largest
// memory request, or the whole GPU for a request without one.
func requestOf(spec *resourceapi.ResourceClaimSpec, gpuMemory int64) int64 {
	var need int64
	for _, r := range spec.Devices.Requests {
		if r.Exactly == nil {
			continue
		}
		if r.Exactly.Capacity == nil {
			need = max(need, gpuMemory)
			continue
		}
		if q, ok := r.Exactly.Capacity.Requests["memory"]; ok {
			need = max(need, q.Value())
		}
	}
	return need
}

func (t *churnTracker) start(ctx context.Context) error {
	_, err := t.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.observe,
		UpdateFunc: func(_, obj any) { t.observe(obj) },
	})
	if err != nil {
		return err
	}
	go t.pods.Run(ctx.Done())
	go t.claims.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), t.pods.HasSynced, t.claims.HasSynced) {
		return fmt.Errorf("waiting for the pod and claim informers: %w", ctx.Err())
	}
	return nil
}

func (t *churnTracker) observe(obj any) {
	pod, ok := obj.(*v1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.created[pod.Name]; !ok {
		t.created[pod.Name] = now
	}
	if pod.Spec.NodeName != "" && t.bound[pod.Name].IsZero() {
		t.bound[pod.Name] = now
		t.changed = now
	}
}

// creating records a pod's creation time just before it is created.
func (t *churnTracker) creating(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.created[name] = time.Now()
}

// pickRunning chooses a running pod by pick among those bound and not
// yet chosen, sorted by name, and marks it gone; "" when none runs.
func (t *churnTracker) pickRunning(pick uint64) string {
	var running []string
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, obj := range t.pods.GetStore().List() {
		p := obj.(*v1.Pod)
		if p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !t.departed[p.Name] {
			running = append(running, p.Name)
		}
	}
	if len(running) == 0 {
		return ""
	}
	slices.Sort(running)
	name := running[pick%uint64(len(running))]
	t.departed[name] = true
	return name
}

// sample reads the cluster as the informers have it now.
func (t *churnTracker) sample(now, first time.Time) churnSample {
	live := map[types.UID]bool{}
	byUID := map[types.UID]*v1.Pod{}
	var pending []*v1.Pod
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, obj := range t.pods.GetStore().List() {
		p := obj.(*v1.Pod)
		byUID[p.UID] = p
		switch {
		case p.DeletionTimestamp != nil || t.departed[p.Name]:
		case p.Spec.NodeName != "":
			live[p.UID] = true
		default:
			pending = append(pending, p)
		}
	}
	consumed := map[string]int64{}
	liveGPUs := map[string]bool{}
	var liveBytes int64
	for _, obj := range t.claims.GetStore().List() {
		c := obj.(*resourceapi.ResourceClaim)
		if c.Status.Allocation == nil {
			continue
		}
		owner := ownerPod(c)
		var claimBytes int64
		for _, r := range c.Status.Allocation.Devices.Results {
			gpu := r.Pool + "/" + r.Device
			q, ok := r.ConsumedCapacity["memory"]
			bytes := t.capacity[gpu] // a whole device: no consumed capacity
			if ok {
				bytes = q.Value()
			}
			consumed[gpu] += bytes
			claimBytes = max(claimBytes, bytes)
			if live[owner] {
				liveGPUs[gpu] = true
				liveBytes += bytes
			}
		}
		if tmpl := claimTemplate(c, byUID[owner]); tmpl != "" {
			t.need[tmpl] = max(t.need[tmpl], claimBytes)
		}
	}
	s := churnSample{T: now.Sub(first).Seconds(), GPUs: len(liveGPUs), Pending: len(pending)}
	if t.gpuMemory > 0 {
		s.LowerBound = int((liveBytes + t.gpuMemory - 1) / t.gpuMemory)
	}
	gpus := make(map[string]*gpuRoom, len(t.capacity))
	for g, c := range t.capacity {
		gpus[g] = &gpuRoom{capacity: c, consumed: consumed[g]}
	}
	for _, p := range pending {
		if now.Sub(t.created[p.Name]) > starveAfter && roomFor(gpus, t.podNeed(p)) {
			t.starved[p.Name] = true
			s.Starved++
		}
	}
	return s
}

// claimTemplate is the template a claim was generated from: a generated
// claim names its pod's claim entry (PodResourceClaimAnnotation), which
// names the template; "" when the pod is gone or named the claim itself.
func claimTemplate(c *resourceapi.ResourceClaim, pod *v1.Pod) string {
	if pod == nil {
		return ""
	}
	for _, rc := range pod.Spec.ResourceClaims {
		if rc.Name == c.Annotations[resourceapi.PodResourceClaimAnnotation] && rc.ResourceClaimTemplateName != nil {
			return *rc.ResourceClaimTemplateName
		}
	}
	return ""
}

// podNeed is the most memory one of the pod's claims needs of a GPU.
func (t *churnTracker) podNeed(p *v1.Pod) int64 {
	var need int64
	for _, rc := range p.Spec.ResourceClaims {
		if rc.ResourceClaimTemplateName != nil {
			need = max(need, t.need[*rc.ResourceClaimTemplateName])
		}
	}
	return need
}

// ownerPod is the UID of the pod a generated claim belongs to.
func ownerPod(c *resourceapi.ResourceClaim) types.UID {
	for _, o := range c.OwnerReferences {
		if o.Kind == "Pod" {
			return o.UID
		}
	}
	return ""
}

// waitPlaced returns once the informer holds at least want pods and none
// is pending, or every pending pod is one the scheduler found
// unschedulable and none was bound for settle (it placed what it can).
func (t *churnTracker) waitPlaced(ctx context.Context, want int, settle time.Duration) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	begin := time.Now()
	for {
		pending, unschedulable, live := 0, 0, 0
		t.mu.Lock()
		for _, obj := range t.pods.GetStore().List() {
			p := obj.(*v1.Pod)
			if p.DeletionTimestamp != nil || t.departed[p.Name] {
				continue
			}
			live++
			if p.Spec.NodeName == "" {
				pending++
				if isUnschedulable(p) {
					unschedulable++
				}
			}
		}
		changed := t.changed
		t.mu.Unlock()
		if live >= want && (pending == 0 || (pending == unschedulable && time.Since(later(changed, begin)) > settle)) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func isUnschedulable(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// binds returns how many pods were bound in [from, to], the create-to-bind
// latencies of those created in it, and the longest wait of a pod counted
// as starved (to its bind, or to `to`).
func (t *churnTracker) binds(from, to time.Time) (n int, latencies []float64, starved int, longest float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, at := range t.bound {
		if at.Before(from) || at.After(to) {
			continue
		}
		n++
		if c := t.created[name]; !c.Before(from) {
			latencies = append(latencies, at.Sub(c).Seconds())
		}
	}
	for name := range t.starved {
		end := to
		if at := t.bound[name]; !at.IsZero() && at.Before(to) {
			end = at
		}
		longest = max(longest, end.Sub(t.created[name]).Seconds())
	}
	return n, latencies, len(t.starved), longest
}
