// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corelisters "k8s.io/client-go/listers/core/v1"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/kai"
)

// templateLoop creates the ResourceClaimTemplates that translated pods
// name. The admission webhook only patches the pod (recording the template's
// name and the inputs it was computed from); this loop, acting on pods that
// exist in the API server, is the only place templates are created, so an
// admission request, dry-run or unauthenticated, creates nothing. Until the
// template exists the pod's claim waits: the resourceclaim controller
// retries the pod.
type templateLoop struct {
	client    kubernetes.Interface
	pods      corelisters.PodLister
	templates resourcelisters.ResourceClaimTemplateLister
	queue     workqueue.TypedRateLimitingInterface[cache.ObjectName]
	opts      kai.Options
	recorder  events.EventRecorder
	// broadcaster sends recorder's Events; run shuts it down on return.
	broadcaster events.EventBroadcaster
	synced      []cache.InformerSynced
}

// newTemplateLoop registers its informers: translated pods only (by label)
// and the templates gpufrac made (by label), so it caches nothing else.
func newTemplateLoop(ctx context.Context, client kubernetes.Interface, opts kai.Options) (*templateLoop, []informers.SharedInformerFactory) {
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kai.LabelTranslated + "=true" }))
	tmplFactory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = kai.LabelManagedBy + "=" + kai.ManagedByValue }))
	pods := podFactory.Core().V1().Pods()
	tmpls := tmplFactory.Resource().V1().ResourceClaimTemplates()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	l := &templateLoop{
		client: client, pods: pods.Lister(), templates: tmpls.Lister(), opts: opts,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "kai-templates"}),
		recorder: b.NewRecorder(scheme.Scheme, "gpufrac-controller"), broadcaster: b,
		synced: []cache.InformerSynced{pods.Informer().HasSynced, tmpls.Informer().HasSynced},
	}
	enqueue := func(obj any) {
		if key, err := cache.ObjectToName(obj); err == nil {
			l.queue.Add(key)
		}
	}
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
	})
	// A template deleted under a pod that still waits for it is made again.
	_, _ = tmpls.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if key, err := cache.ObjectToName(obj); err == nil {
				all, _ := l.pods.Pods(key.Namespace).List(labels.Everything())
				for _, p := range all {
					if p.Annotations[kai.AnnotationTranslated] == key.Name {
						enqueue(p)
					}
				}
			}
		},
	})
	return l, []informers.SharedInformerFactory{podFactory, tmplFactory}
}

// run works the queue until ctx ends.
func (l *templateLoop) run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer l.broadcaster.Shutdown()
	defer l.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), l.synced...) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, func(ctx context.Context) {
			for l.next(ctx) {
			}
		}, time.Second)
	}
	<-ctx.Done()
}

func (l *templateLoop) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	if err := l.sync(ctx, key); err != nil {
		klog.FromContext(ctx).Error(err, "Creating a KAI claim template; will retry", "pod", key)
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	return true
}

// sync makes sure the template the pod names exists. Errors returned are
// retried; a pod whose template cannot be recomputed is reported once.
func (l *templateLoop) sync(ctx context.Context, key cache.ObjectName) error {
	pod, err := l.pods.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil {
		// Scheduled (its claim exists) or going away.
		return nil
	}
	tmpl, err := kai.TemplateFor(pod, l.opts)
	if err != nil {
		l.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "KAITemplateFailed", "Translate", "%v", err)
		return nil
	}
	if _, err := l.templates.ResourceClaimTemplates(pod.Namespace).Get(tmpl.Name); err == nil {
		return nil
	}
	_, err = l.client.ResourceV1().ResourceClaimTemplates(pod.Namespace).Create(ctx, tmpl, metav1.CreateOptions{})
	switch {
	case err == nil:
		l.recorder.Eventf(pod, nil, corev1.EventTypeNormal, "KAITemplateCreated", "Translate",
			"Created ResourceClaimTemplate %s from the pod's KAI GPU-sharing annotations", tmpl.Name)
		klog.FromContext(ctx).V(2).Info("Created a KAI claim template", "pod", klog.KObj(pod), "template", tmpl.Name)
	case apierrors.IsAlreadyExists(err):
		// Equal names are equal specs (the name is a hash of the spec),
		// unless someone else made the template first; the webhook refuses
		// such pods, this catches one made after admission.
		existing, gerr := l.client.ResourceV1().ResourceClaimTemplates(pod.Namespace).Get(ctx, tmpl.Name, metav1.GetOptions{})
		if gerr == nil && !equality.Semantic.DeepEqual(existing.Spec.Spec, tmpl.Spec.Spec) {
			l.recorder.Eventf(pod, nil, corev1.EventTypeWarning, "KAITemplateDiffers", "Translate",
				"ResourceClaimTemplate %s exists with a spec other than the one the pod's KAI annotations give", tmpl.Name)
		}
	default:
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", pod.Namespace, tmpl.Name, err)
	}
	return nil
}
