// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/node/preparer"
)

// podLookup reads the pods a claim is reserved for (one guarantee per
// claim) from a watch of this node's pods, and GETs a pod the watch has not
// delivered yet. The kubelet calls Prepare for a pod it saw bound here
// through its own watch, so this one usually has it too, and Prepare makes
// no API call of its own (docs/benchmarks.md, "Prepare against
// dra-example-driver"). A cached pod is only used when its UID is the one
// the claim names: the containers and claims of a pod are immutable, so
// that copy is authoritative; a pod recreated under the same name is read
// afresh.
type podLookup struct {
	client kubernetes.Interface
	lister corelisters.PodLister
	synced atomic.Bool
	// hits and misses count cache answers and GETs (tests).
	hits, misses atomic.Int64
}

// newPodLookup watches the pods bound to nodeName until ctx ends; nil
// without a client. A watch that cannot start (RBAC without list and
// watch on pods) leaves every lookup to a GET.
func newPodLookup(ctx context.Context, client kubernetes.Interface, nodeName string) *podLookup {
	if client == nil {
		return nil
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
	inf := factory.Core().V1().Pods()
	// Only the UID, the containers' claims and the pod's claims are read;
	// the rest of a pod is not kept.
	if err := inf.Informer().SetTransform(trimPod); err != nil {
		klog.FromContext(ctx).Error(err, "Pod watch without trimming")
	}
	l := &podLookup{client: client, lister: inf.Lister()}
	factory.Start(ctx.Done())
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
			l.synced.Store(true)
		}
	}()
	return l
}

// trimPod keeps what checkOneGuarantee reads.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		Spec: corev1.PodSpec{
			NodeName:       pod.Spec.NodeName,
			ResourceClaims: pod.Spec.ResourceClaims,
		},
		// Claims made from templates are named here.
		Status: corev1.PodStatus{ResourceClaimStatuses: pod.Status.ResourceClaimStatuses},
	}
	for _, set := range []struct {
		from []corev1.Container
		to   *[]corev1.Container
	}{{pod.Spec.InitContainers, &out.Spec.InitContainers}, {pod.Spec.Containers, &out.Spec.Containers}} {
		for _, c := range set.from {
			*set.to = append(*set.to, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{Claims: c.Resources.Claims}})
		}
	}
	return out, nil
}

// Get implements preparer.PodGetter. The cached copy answers only when it
// is the pod the claim is reserved for (its UID) and already names the
// claim (a claim made from a template is named in the pod's status, which
// the cache could hold from before): anything else is read afresh, so a
// lagging cache can cost a GET but never skip the check.
func (l *podLookup) Get(ctx context.Context, claim *resourceapi.ResourceClaim, ref resourceapi.ResourceClaimConsumerReference) (*corev1.Pod, error) {
	if l.synced.Load() {
		if pod, err := l.lister.Pods(claim.Namespace).Get(ref.Name); err == nil && pod.UID == ref.UID && namesClaim(pod, claim.Name) {
			l.hits.Add(1)
			return pod, nil
		}
	}
	l.misses.Add(1)
	return l.client.CoreV1().Pods(claim.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
}

// namesClaim says whether one of pod's claims resolves to claimName.
func namesClaim(pod *corev1.Pod, claimName string) bool {
	for i := range pod.Spec.ResourceClaims {
		if name, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i]); err == nil && name != nil && *name == claimName {
			return true
		}
	}
	return false
}

// getter is the lookup as a preparer.PodGetter; nil when l is.
func (l *podLookup) getter() preparer.PodGetter {
	if l == nil {
		return nil
	}
	return l.Get
}
