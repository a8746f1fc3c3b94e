// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// DefaultTemplateGCGrace is how long a template gpufrac made stays once
// no pod refers to it: a Deployment scaled to zero and back, or a rolling
// update between the old pods' end and the new pods' admission, finds it
// still there.
const DefaultTemplateGCGrace = 10 * time.Minute

// templateGC deletes the ResourceClaimTemplates gpufrac made (the loop's
// informer: label app.kubernetes.io/managed-by=gpufrac-controller, which
// every translation labels its templates with: KAI's today, HAMi's when
// they exist) once no pod has referred to one for grace. The packing
// parameter follows the deletion (its informer drops the key).
//
// The caches only say which templates may be unused: the pod cache holds
// translated pods alone, so before a deletion every pod of the namespace
// is listed from the API server, and a template some pod names is kept,
// whoever made the pod. The deletion is conditional on the template's UID,
// so a template made again under the same name meanwhile stays. A pod
// admitted in the moment between the check and the deletion gets its
// template made again by the template loop (it watches deletions).
type templateGC struct {
	client    kubernetes.Interface
	templates resourcelisters.ResourceClaimTemplateLister
	pods      corelisters.PodLister
	grace     time.Duration
	now       func() time.Time
	// unused holds when each template was first seen with no pod naming
	// it; one goroutine reads and writes it.
	unused map[cache.ObjectName]time.Time
}

func newTemplateGC(client kubernetes.Interface, l *templateLoop, grace time.Duration) *templateGC {
	return &templateGC{client: client, templates: l.templates, pods: l.pods, grace: grace, now: time.Now, unused: map[cache.ObjectName]time.Time{}}
}

// run sweeps every quarter of the grace period (at least every second, at
// most every minute) until ctx ends.
func (g *templateGC) run(ctx context.Context) {
	period := min(max(g.grace/4, time.Second), time.Minute)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := g.sweep(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Deleting unused claim templates; will retry")
		}
	}, period)
}

// sweep deletes the templates unused for grace and returns the first error.
func (g *templateGC) sweep(ctx context.Context) error {
	tmpls, err := g.templates.List(labels.Everything())
	if err != nil {
		return err
	}
	pods, err := g.pods.List(labels.Everything())
	if err != nil {
		return err
	}
	named := map[cache.ObjectName]bool{}
	for _, p := range pods {
		for _, n := range templatesOf(p) {
			named[cache.ObjectName{Namespace: p.Namespace, Name: n}] = true
		}
	}
	now := g.now()
	seen := map[cache.ObjectName]bool{}
	var firstErr error
	for _, t := range tmpls {
		key := cache.ObjectName{Namespace: t.Namespace, Name: t.Name}
		seen[key] = true
		if named[key] {
			delete(g.unused, key)
			continue
		}
		since, ok := g.unused[key]
		if !ok {
			g.unused[key] = now
			continue
		}
		if now.Sub(since) < g.grace || now.Sub(t.CreationTimestamp.Time) < g.grace {
			continue
		}
		if err := g.delete(ctx, t); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	for key := range g.unused {
		if !seen[key] {
			delete(g.unused, key)
		}
	}
	return firstErr
}

// delete removes t unless a pod of its namespace, any pod, names it.
func (g *templateGC) delete(ctx context.Context, t *resourceapi.ResourceClaimTemplate) error {
	key := cache.ObjectName{Namespace: t.Namespace, Name: t.Name}
	inUse, err := g.namedByAnyPod(ctx, key)
	if err != nil {
		return err
	}
	if inUse {
		delete(g.unused, key)
		return nil
	}
	err = g.client.ResourceV1().ResourceClaimTemplates(t.Namespace).Delete(ctx, t.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &t.UID}})
	switch {
	case err == nil:
		klog.FromContext(ctx).Info("Deleted a claim template no pod refers to", "template", klog.KObj(t), "unusedFor", g.grace)
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// Gone, or made again: another replica or a user got there.
	default:
		return fmt.Errorf("deleting ResourceClaimTemplate %s: %w", key, err)
	}
	delete(g.unused, key)
	return nil
}

// namedByAnyPod lists the namespace's pods from the API server, in pages.
func (g *templateGC) namedByAnyPod(ctx context.Context, key cache.ObjectName) (bool, error) {
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := g.client.CoreV1().Pods(key.Namespace).List(ctx, opts)
		if err != nil {
			return false, fmt.Errorf("listing the pods of %s before deleting template %s: %w", key.Namespace, key.Name, err)
		}
		for i := range list.Items {
			for _, n := range templatesOf(&list.Items[i]) {
				if n == key.Name {
					return true, nil
				}
			}
		}
		if list.Continue == "" {
			return false, nil
		}
		opts.Continue = list.Continue
	}
}

// templatesOf lists the templates a pod's claims are made from.
func templatesOf(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.ResourceClaims {
		if c.ResourceClaimTemplateName != nil {
			out = append(out, *c.ResourceClaimTemplateName)
		}
	}
	return out
}
