// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nodelabel keeps the node label the packing webhook's node
// affinity prefers: on every node, how many of its GPUs hold at least one
// allocated gpufrac claim. kube-scheduler's NodeAffinity score reads labels,
// so fraction pods prefer the nodes whose GPUs are most in use; that costs
// the scheduler a label lookup per scored node, where a pod affinity among
// fraction pods costs it a pass over every fraction pod in the cluster for
// every pod it schedules (docs/design/packing.md has the measurements).
//
// The label is a preference only: when this loop stops, or lags behind
// allocations, pods still schedule wherever they fit, and only packing is
// lost.
package nodelabel

import (
	"context"
	"fmt"
	"time"

	"k8s.io/utils/ptr"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// LabelGPUsInUse is the node label: the number of the node's GPUs that
// hold gpufrac claims; "0" on the empty GPU nodes designated to be filled
// next (LabelFillOrder ranks them), absent on every other node whose GPUs
// hold none.
const LabelGPUsInUse = "gpufrac.dev/gpus-in-use"

// Designated is the label value of the nodes to fill next. Without them,
// the pods of a burst (a Deployment scaled up) would spread before the
// first claims' labels are written (the allocation reaches the API server
// in the scheduler's PreBind, a label one watch and one patch later):
// measured, 40 pods on 8 nodes landed on 7 nodes. With them they all
// prefer one node from the start, and when it takes its first claim the
// next is designated (LabelFillOrder).
const Designated = "0"

// designateKey is the queue key of the designation step (never a node
// name: names are not empty).
const designateKey = ""

// byNode indexes claims by the node their allocation is for.
const byNode = "gpufrac.dev/node"

// AllocatedNode returns the node a claim's allocation is pinned to: the
// allocator writes a node-local allocation's node as a
// metadata.name matchFields term (documented: ResourceClaim
// status.allocation.nodeSelector; inferred for the exact shape from the
// structured allocator's source).
func AllocatedNode(claim *resourceapi.ResourceClaim) string {
	a := claim.Status.Allocation
	if a == nil || a.NodeSelector == nil {
		return ""
	}
	for _, t := range a.NodeSelector.NodeSelectorTerms {
		for _, f := range t.MatchFields {
			if f.Key == "metadata.name" && f.Operator == v1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// GPUsInUse counts the distinct gpufrac devices the claims that ask for a
// fraction hold. Whole-GPU claims (no memory request) are left out: the
// packing webhook does not draw them to fraction nodes, and a node they
// alone use must not draw fractions either (measured: whole-GPU pods, placed
// on the emptiest nodes, pulled fractions after them and opened nodes).
func GPUsInUse(claims []*resourceapi.ResourceClaim) int {
	devices := sets.New[string]()
	for _, c := range claims {
		if c.Status.Allocation == nil || !asksFraction(&c.Spec) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			// A monitoring device (adminAccess) holds no part of the GPU.
			if r.Driver == v1alpha1.DriverName && !ptr.Deref(r.AdminAccess, false) {
				devices.Insert(r.Pool + "/" + r.Device)
			}
		}
	}
	return devices.Len()
}

// Loop keeps LabelGPUsInUse on every node up to date with the allocated
// claims.
type Loop struct {
	client kubernetes.Interface
	claims cache.Indexer
	nodes  corelisters.NodeLister
	slices resourcelisters.ResourceSliceLister
	synced []cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
}

// New registers the informers the loop needs with factory (start it
// after). Claims are stripped to their allocation in the cache: the loop
// reads nothing else, and a large cluster holds many of them.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface) (*Loop, error) {
	l := &Loop{client: client, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "packing-labels"})}
	ci := factory.Resource().V1().ResourceClaims().Informer()
	if err := ci.SetTransform(StripClaim); err != nil {
		return nil, fmt.Errorf("claim informer transform: %w", err)
	}
	if err := ci.AddIndexers(cache.Indexers{byNode: func(obj any) ([]string, error) {
		if c, ok := obj.(*resourceapi.ResourceClaim); ok {
			if n := AllocatedNode(c); n != "" {
				return []string{n}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("claim indexer: %w", err)
	}
	enqueue := func(obj any) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if c, ok := obj.(*resourceapi.ResourceClaim); ok {
			if n := AllocatedNode(c); n != "" {
				l.queue.Add(n)
			}
		}
	}
	if _, err := ci.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(old, obj any) {
			enqueue(old)
			enqueue(obj)
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	ni := factory.Core().V1().Nodes()
	// A node whose label someone else changed is put right; a node added,
	// removed or changed as DesignationMayChange says may change which
	// nodes are designated.
	if _, err := ni.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { l.queue.Add(designateKey) },
		UpdateFunc: func(old, obj any) {
			o, n := old.(*v1.Node), obj.(*v1.Node)
			if LabelsOf(o) != LabelsOf(n) {
				l.queue.Add(n.Name)
			}
			if DesignationMayChange(o, n) {
				l.queue.Add(designateKey)
			}
		},
		DeleteFunc: func(any) { l.queue.Add(designateKey) },
	}); err != nil {
		return nil, err
	}
	si := factory.Resource().V1().ResourceSlices()
	if _, err := si.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { l.queue.Add(designateKey) },
	}); err != nil {
		return nil, err
	}
	l.claims, l.nodes, l.slices = ci.GetIndexer(), ni.Lister(), si.Lister()
	l.synced = []cache.InformerSynced{ci.HasSynced, ni.Informer().HasSynced, si.Informer().HasSynced}
	return l, nil
}

// asksFraction tells whether a claim has a request with a memory capacity
// request (of any class: only its gpufrac.dev results are counted).
func asksFraction(spec *resourceapi.ResourceClaimSpec) bool {
	_, ok := FractionMemory(spec)
	return ok
}

// FractionMemory is the largest memory capacity request of a claim's
// requests (a firstAvailable request counts its largest subrequest), and
// whether any request has one: a claim without one is a whole-GPU claim.
func FractionMemory(spec *resourceapi.ResourceClaimSpec) (resource.Quantity, bool) {
	var most resource.Quantity
	found := false
	take := func(c *resourceapi.CapacityRequirements) {
		if c == nil {
			return
		}
		if q, ok := c.Requests["memory"]; ok {
			if !found || q.Cmp(most) > 0 {
				most = q
			}
			found = true
		}
	}
	for _, r := range spec.Devices.Requests {
		if r.Exactly != nil {
			take(r.Exactly.Capacity)
		}
		for _, sub := range r.FirstAvailable {
			take(sub.Capacity)
		}
	}
	return most, found
}

// StripClaim keeps what the controller's readers of the shared claim
// informer read: the spec, whole (admission's InformerCluster.ClaimSpec
// decides from its device classes and config whether a claim a pod names
// is a gpufrac one; GPUsInUse and the scheduler extender read its memory
// requests), and the allocation's node selector and results (AllocatedNode,
// GPUsInUse, internal/packing/extender). Everything else of the object, managed
// fields, labels, annotations, owner references and the status's
// reservedFor, devices and conditions, is dropped: a large cluster holds
// many claims, and the scheduler and kubelet plugin rewrite their status.
// A transform applies to every handler and lister of the informer, so
// nothing may be dropped that one of them reads.
func StripClaim(obj any) (any, error) {
	c, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return obj, nil
	}
	out := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: c.Name, Namespace: c.Namespace, UID: c.UID, ResourceVersion: c.ResourceVersion},
		Spec:       c.Spec,
	}
	if a := c.Status.Allocation; a != nil {
		out.Status.Allocation = &resourceapi.AllocationResult{NodeSelector: a.NodeSelector, Devices: resourceapi.DeviceAllocationResult{Results: a.Devices.Results}}
	}
	return out, nil
}

// Run labels nodes until ctx ends. Nodes that carry the label but hold no
// claim (claims removed while the loop was down) are put right at start.
func (l *Loop) Run(ctx context.Context, workers int) {
	defer l.queue.ShutDown()
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), l.synced...) {
		return
	}
	nodes, err := l.nodes.List(labels.Everything())
	if err != nil {
		logger.Error(err, "Listing nodes")
	}
	for _, n := range nodes {
		// Either label alone counts: a rank left without its "0" (an
		// edit by hand) would still draw pods.
		if LabelsOf(n) != (Labels{}) {
			l.queue.Add(n.Name)
		}
	}
	l.queue.Add(designateKey)
	go func() { <-ctx.Done(); l.queue.ShutDown() }()
	done := make(chan struct{})
	for range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			wait.UntilWithContext(ctx, l.worker, time.Second)
		}()
	}
	for range workers {
		<-done
	}
}

func (l *Loop) worker(ctx context.Context) {
	for {
		name, quit := l.queue.Get()
		if quit {
			return
		}
		err := l.sync(ctx, name)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Labelling node", "node", name)
			l.queue.AddRateLimited(name)
		} else {
			l.queue.Forget(name)
		}
		l.queue.Done(name)
	}
}

func (l *Loop) sync(ctx context.Context, name string) error {
	if name == designateKey {
		return l.designate(ctx)
	}
	node, err := l.nodes.Get(name)
	if err != nil {
		// A node that is gone needs no label.
		return nil //nolint:nilerr // not found in the cache
	}
	objs, err := l.claims.ByIndex(byNode, name)
	if err != nil {
		return err
	}
	claims := make([]*resourceapi.ResourceClaim, 0, len(objs))
	for _, o := range objs {
		claims = append(claims, o.(*resourceapi.ResourceClaim))
	}
	want := LabelsInUse(GPUsInUse(claims))
	if want == (Labels{}) && node.Labels[LabelGPUsInUse] == Designated {
		// Still empty: it stays designated, at its rank (designate
		// removes extras and ranks them).
		return nil
	}
	return l.patch(ctx, node, want)
}
