// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Run watches this node's daemon Pods and reconciles whenever one changes,
// and at least every interval (a pass then reads the watch's cache, not
// the API), until ctx ends. Its watch is shut down before it returns.
func (m *Manager) Run(ctx context.Context, interval time.Duration) {
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0, informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = m.selector() }))
	defer factory.Shutdown()
	pods := factory.Core().V1().Pods()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke() },
		UpdateFunc: func(any, any) { poke() },
		DeleteFunc: func(any) { poke() },
	}); err != nil {
		logger.Error(err, "Watching MPS daemons")
		return
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), pods.Informer().HasSynced) {
		return
	}
	m.lister.Store(&podLister{pods.Lister()})
	defer m.lister.Store(nil)
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-timer.C:
		}
		if err := m.reconcile(ctx); err != nil {
			logger.Error(err, "Reconciling MPS daemons")
		}
		timer.Reset(interval)
	}
}

// podLister wraps the watch's cache, so that it can sit in an atomic.Pointer.
type podLister struct{ corev1listers.PodLister }

func (m *Manager) selector() string {
	return LabelComponent + "=" + ComponentValue + "," + LabelNode + "=" + m.cfg.NodeName
}

// daemons lists this node's daemon Pods: from the watch's cache while Run
// watches, else (Restore at start) from the API.
func (m *Manager) daemons(ctx context.Context) ([]corev1.Pod, error) {
	if l := m.lister.Load(); l != nil {
		sel, err := labels.Parse(m.selector())
		if err != nil {
			return nil, err
		}
		cached, err := l.Pods(m.cfg.Namespace).List(sel)
		if err != nil {
			return nil, err
		}
		out := make([]corev1.Pod, len(cached))
		for i, p := range cached {
			out[i] = *p.DeepCopy()
		}
		return out, nil
	}
	list, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: m.selector()})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}
