// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
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

	"github.com/gpufrac/gpufrac/internal/translate/hami"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
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
	tr        translation
	recorder  events.EventRecorder
	// broadcaster sends recorder's Events; run shuts it down on return.
	broadcaster events.EventBroadcaster
	synced      []cache.InformerSynced
}

// translation is one request language the loop makes templates for.
type translation struct {
	// name prefixes the Events' reasons (KAI, HAMi) and names the queue.
	name string
	// label selects the pods it translated (value "true").
	label string
	// templates recomputes the templates a translated pod names.
	templates func(*corev1.Pod) ([]*resourceapi.ResourceClaimTemplate, error)
	// names lists the templates a translated pod names.
	names func(*corev1.Pod) []string
}

// kaiTranslation is KAI's: one template per pod.
func kaiTranslation(opts kai.Options) translation {
	return translation{
		name: "KAI", label: kai.LabelTranslated,
		templates: func(p *corev1.Pod) ([]*resourceapi.ResourceClaimTemplate, error) {
			t, err := kai.TemplateFor(p, opts)
			if err != nil {
				return nil, err
			}
			return []*resourceapi.ResourceClaimTemplate{t}, nil
		},
		names: func(p *corev1.Pod) []string { return []string{p.Annotations[kai.AnnotationTranslated]} },
	}
}

// hamiTranslation is HAMi's: one template per container that gets GPUs.
func hamiTranslation(opts hami.Options) translation {
	return translation{
		name: "HAMi", label: hami.LabelTranslated,
		templates: func(p *corev1.Pod) ([]*resourceapi.ResourceClaimTemplate, error) {
			return hami.TemplatesFor(p, opts)
		},
		names: hami.TemplateNames,
	}
}

// newTemplateLoop registers its informers: the pods tr translated only (by
// label) and the templates gpufrac made (by label), so it caches nothing else.
func newTemplateLoop(ctx context.Context, client kubernetes.Interface, tr translation) (*templateLoop, []informers.SharedInformerFactory) {
	podFactory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = tr.label + "=true" }))
	tmplFactory := informers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = translated.LabelManagedBy + "=" + translated.ManagedByValue
		}))
	pods := podFactory.Core().V1().Pods()
	tmpls := tmplFactory.Resource().V1().ResourceClaimTemplates()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	l := &templateLoop{
		client: client, pods: pods.Lister(), templates: tmpls.Lister(), tr: tr,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: strings.ToLower(tr.name) + "-templates"}),
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
					if slices.Contains(tr.names(p), key.Name) {
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
		klog.FromContext(ctx).Error(err, "Creating a claim template; will retry", "translation", l.tr.name, "pod", key)
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
	tmpls, err := l.tr.templates(pod)
	if err != nil {
		l.recorder.Eventf(pod, nil, corev1.EventTypeWarning, l.tr.name+"TemplateFailed", "Translate", "%v", err)
		return nil
	}
	for _, tmpl := range tmpls {
		if err := l.ensure(ctx, pod, tmpl); err != nil {
			return err
		}
	}
	return nil
}

// ensure creates tmpl unless it exists.
func (l *templateLoop) ensure(ctx context.Context, pod *corev1.Pod, tmpl *resourceapi.ResourceClaimTemplate) error {
	if _, err := l.templates.ResourceClaimTemplates(pod.Namespace).Get(tmpl.Name); err == nil {
		return nil
	}
	_, err := l.client.ResourceV1().ResourceClaimTemplates(pod.Namespace).Create(ctx, tmpl, metav1.CreateOptions{})
	switch {
	case err == nil:
		l.recorder.Eventf(pod, nil, corev1.EventTypeNormal, l.tr.name+"TemplateCreated", "Translate",
			"Created ResourceClaimTemplate %s from the pod's %s GPU request", tmpl.Name, l.tr.name)
		klog.FromContext(ctx).V(2).Info("Created a claim template", "translation", l.tr.name, "pod", klog.KObj(pod), "template", tmpl.Name)
	case apierrors.IsAlreadyExists(err):
		// Equal names are equal specs (the name is a hash of the spec),
		// unless someone else made the template first; the webhook refuses
		// such pods, this catches one made after admission.
		existing, gerr := l.client.ResourceV1().ResourceClaimTemplates(pod.Namespace).Get(ctx, tmpl.Name, metav1.GetOptions{})
		if gerr == nil && !equality.Semantic.DeepEqual(existing.Spec.Spec, tmpl.Spec.Spec) {
			l.recorder.Eventf(pod, nil, corev1.EventTypeWarning, l.tr.name+"TemplateDiffers", "Translate",
				"ResourceClaimTemplate %s exists with a spec other than the one the pod's %s GPU request gives", tmpl.Name, l.tr.name)
		}
	default:
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", pod.Namespace, tmpl.Name, err)
	}
	return nil
}
