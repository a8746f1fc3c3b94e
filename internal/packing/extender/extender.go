// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"k8s.io/utils/ptr"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/packing/nodelabel"
)

// PathPrioritize is the prioritize verb under the extender's urlPrefix
// "/scheduler" (the scheduler POSTs to urlPrefix + "/" + prioritizeVerb;
// source: pkg/scheduler/extender.go, HTTPExtender.send).
const PathPrioritize = "/scheduler/prioritize"

// maxBody bounds a request: a pod and the names of the feasible nodes
// (nodeCacheCapable) are a few hundred KiB at 5,000 nodes.
const maxBody = 16 << 20

const (
	claimsByNode = "gpufrac.dev/extender-node"
	slicesByNode = "gpufrac.dev/extender-slice-node"
)

// Extender scores nodes from the controller's informers.
type Extender struct {
	client kubernetes.Interface
	claims cache.Indexer
	slices cache.Indexer
	synced []cache.InformerSynced
}

// New registers what the extender reads with factory (start it after).
// Claims are cached stripped to their allocation and memory request
// (nodelabel.StripClaim, the same transform the node label loop sets).
func New(factory informers.SharedInformerFactory, client kubernetes.Interface) (*Extender, error) {
	ci := factory.Resource().V1().ResourceClaims().Informer()
	if err := ci.SetTransform(nodelabel.StripClaim); err != nil {
		return nil, fmt.Errorf("claim informer transform: %w", err)
	}
	if err := ci.AddIndexers(cache.Indexers{claimsByNode: func(obj any) ([]string, error) {
		if c, ok := obj.(*resourceapi.ResourceClaim); ok {
			if n := nodelabel.AllocatedNode(c); n != "" {
				return []string{n}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("claim indexer: %w", err)
	}
	si := factory.Resource().V1().ResourceSlices().Informer()
	if err := si.AddIndexers(cache.Indexers{slicesByNode: func(obj any) ([]string, error) {
		if s, ok := obj.(*resourceapi.ResourceSlice); ok && s.Spec.Driver == v1alpha1.DriverName && s.Spec.NodeName != nil {
			return []string{*s.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, fmt.Errorf("slice indexer: %w", err)
	}
	return &Extender{client: client, claims: ci.GetIndexer(), slices: si.GetIndexer(), synced: []cache.InformerSynced{ci.HasSynced, si.HasSynced}}, nil
}

// Synced tells whether the informers have synced.
func (e *Extender) Synced() bool {
	for _, s := range e.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Handler serves PathPrioritize.
func (e *Extender) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathPrioritize, e.prioritize)
	return mux
}

func (e *Extender) prioritize(w http.ResponseWriter, r *http.Request) {
	logger := klog.FromContext(r.Context())
	var args extenderv1.ExtenderArgs
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&args); err != nil {
		http.Error(w, fmt.Sprintf("decoding ExtenderArgs: %v", err), http.StatusBadRequest)
		return
	}
	if args.Pod == nil {
		http.Error(w, "ExtenderArgs.pod: missing", http.StatusBadRequest)
		return
	}
	candidates := nodeNames(&args)
	need := e.need(r.Context(), args.Pod)
	nodes := make(map[string]Node, len(candidates))
	if need > 0 {
		for _, name := range candidates {
			nodes[name] = e.node(name)
		}
	}
	out := Score(need, candidates, nodes)
	logger.V(5).Info("Prioritized", "pod", klog.KObj(args.Pod), "need", need, "nodes", len(candidates))
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		logger.V(2).Info("Writing the prioritize answer", "err", err)
	}
}

// nodeNames are the candidates: node names with nodeCacheCapable, else
// the names of the nodes sent.
func nodeNames(args *extenderv1.ExtenderArgs) []string {
	if args.NodeNames != nil {
		return *args.NodeNames
	}
	if args.Nodes == nil {
		return nil
	}
	names := make([]string, len(args.Nodes.Items))
	for i := range args.Nodes.Items {
		names[i] = args.Nodes.Items[i].Name
	}
	return names
}

// need is the largest memory request, in bytes, of the pod's fraction
// claims; 0 when it has none or they cannot be read (then the pod gets no
// preference, as without the extender). The claims from templates are
// named in the pod's status by the resourceclaim controller before the
// scheduler considers the pod (documented: pod.status.resourceClaimStatuses).
// A claim just created is often not in this informer's cache yet when the
// scheduler, which saw it first, asks (measured: the first pods of a burst
// scored as if they asked nothing, and spread); it is then read from the
// API server, once.
func (e *Extender) need(ctx context.Context, pod *v1.Pod) int64 {
	var most int64
	for _, name := range podClaimNames(pod) {
		var claim *resourceapi.ResourceClaim
		if obj, ok, err := e.claims.GetByKey(pod.Namespace + "/" + name); err == nil && ok {
			claim = obj.(*resourceapi.ResourceClaim)
		} else if e.client != nil {
			got, err := e.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				klog.FromContext(ctx).V(2).Info("Reading the pod's claim", "pod", klog.KObj(pod), "claim", name, "err", err)
				continue
			}
			claim = got
		}
		if claim == nil {
			continue
		}
		if q, ok := nodelabel.FractionMemory(&claim.Spec); ok {
			most = max(most, q.Value())
		}
	}
	return most
}

func podClaimNames(pod *v1.Pod) []string {
	var names []string
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			names = append(names, *pc.ResourceClaimName)
			continue
		}
		for _, st := range pod.Status.ResourceClaimStatuses {
			if st.Name == pc.Name && st.ResourceClaimName != nil {
				names = append(names, *st.ResourceClaimName)
			}
		}
	}
	return names
}

// node is what the node's gpufrac devices hold, from its slices and the
// claims allocated there.
func (e *Extender) node(name string) Node {
	slices, _ := e.slices.ByIndex(slicesByNode, name)
	claims, _ := e.claims.ByIndex(claimsByNode, name)
	if len(slices) == 0 {
		return nil
	}
	var list []*resourceapi.ResourceSlice
	for _, o := range slices {
		list = append(list, o.(*resourceapi.ResourceSlice))
	}
	var held []*resourceapi.ResourceClaim
	for _, o := range claims {
		held = append(held, o.(*resourceapi.ResourceClaim))
	}
	return NodeOf(list, held)
}

// NodeOf builds a node's GPUs from its gpufrac slices and the claims
// allocated on it. A result's consumed memory is its consumedCapacity
// (set by the allocator for devices that allow multiple allocations,
// documented: DeviceRequestAllocationResult.consumedCapacity), else the
// claim's memory request.
func NodeOf(slices []*resourceapi.ResourceSlice, claims []*resourceapi.ResourceClaim) Node {
	n := Node{}
	for _, s := range slices {
		for _, d := range s.Spec.Devices {
			c, ok := d.Capacity["memory"]
			// MIG instances (type mig) hold no fractions.
			if t, typed := d.Attributes["type"]; !ok || typed && (t.StringValue == nil || *t.StringValue != "gpu") {
				continue
			}
			n[s.Spec.Pool.Name+"/"+d.Name] = GPU{Memory: c.Value.Value()}
		}
	}
	for _, c := range claims {
		if c.Status.Allocation == nil {
			continue
		}
		memory, fraction := nodelabel.FractionMemory(&c.Spec)
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver != v1alpha1.DriverName || ptr.Deref(r.AdminAccess, false) {
				continue // adminAccess: a monitor holds no part of the GPU
			}
			key := r.Pool + "/" + r.Device
			g, ok := n[key]
			if !ok {
				continue // a device the slices no longer publish
			}
			if !fraction {
				g.Whole = true
				n[key] = g
				continue
			}
			used := memory.Value()
			if q, ok := r.ConsumedCapacity["memory"]; ok {
				used = q.Value()
			}
			g.Used += used
			g.Fractions++
			n[key] = g
		}
	}
	return n
}
