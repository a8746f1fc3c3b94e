// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package policyparam keeps the parameter of the packing
// MutatingAdmissionPolicy (deployments/webhooks.yaml): a ConfigMap with one
// key per ResourceClaimTemplate that asks a gpufrac class for a fraction,
// "<namespace>.<template>". The policy's CEL sees only the pod, not the
// templates it names, so this list is how the API server, without calling
// the packing webhook, tells a fraction pod from a whole-GPU pod or another
// driver's pod (docs/design/packing.md has why and what it saves).
//
// The list is a cache the webhook backs: a template missing from it (newer
// than the list, its key too long, the list full) leaves its pods to the
// packing webhook, which reads the template itself. A template wrongly in
// it (deleted, and created again under the same name without a fraction,
// before the list follows) gets a whole-GPU pod the packing terms, which
// are preferences only: the allocator never puts a whole-GPU claim on a
// shared GPU.
package policyparam

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/deviceclass"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

// MaxBytes bounds the keys and values the parameter holds. A ConfigMap
// holds at most 1 MiB (documented: ConfigMap, "The data stored in a
// ConfigMap cannot exceed 1 MiB"); the rest of the margin is its metadata.
// Templates past it are left to the webhook.
const MaxBytes = 768 << 10

// Key is the parameter's key for a template: a namespace name is a DNS
// label (no dots), so the first dot splits it unambiguously. The policy's
// matchCondition builds the same string from request.namespace and the
// pod's resourceClaimTemplateName.
func Key(namespace, template string) string {
	return namespace + "." + template
}

// Data is the parameter's data for templates: a key per template that
// asks a class isGpufrac accepts (deviceclass.SelectsGpufrac, by name)
// for a memory share (podterms.RequestsFraction, the webhook's own test),
// with the empty string as
// value, in key order until MaxBytes. A key that is not a valid ConfigMap
// key (over 253 characters) is left out: its pods go to the webhook.
// left counts the templates left out.
func Data(templates []*resourceapi.ResourceClaimTemplate, isGpufrac func(class string) bool) (data map[string]string, left int) {
	var keys []string
	for _, t := range templates {
		if !podterms.RequestsFraction(&t.Spec.Spec, isGpufrac) {
			continue
		}
		k := Key(t.Namespace, t.Name)
		if len(validation.IsConfigMapKey(k)) > 0 {
			left++
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	data = map[string]string{}
	size := 0
	for i, k := range keys {
		if size+len(k) > MaxBytes {
			left += len(keys) - i
			break
		}
		data[k] = ""
		size += len(k)
	}
	return data, left
}

// syncKey is the queue's one key: every change recomputes the whole list,
// and changes that arrive while one is queued fold into it.
const syncKey = "sync"

// Loop keeps the parameter ConfigMap in step with the templates and
// classes. Every replica of gpufrac-controller runs one; they compute the
// same data from the same objects, and an update that loses a conflict is
// retried against the newer object.
type Loop struct {
	client    kubernetes.Interface
	param     types.NamespacedName
	templates resourcelisters.ResourceClaimTemplateLister
	classes   resourcelisters.DeviceClassLister
	synced    []cache.InformerSynced
	// own watches the parameter ConfigMap alone (a field selector on its
	// name), so a hand edit or a deletion is put right at once.
	own   informers.SharedInformerFactory
	queue workqueue.TypedRateLimitingInterface[string]
	// left is the count of templates the last sync left out (one worker
	// reads and writes it).
	left int
}

// New registers the informers the loop needs with factory (start it
// after); gpufrac-controller's webhooks share them.
func New(factory informers.SharedInformerFactory, client kubernetes.Interface, param types.NamespacedName) (*Loop, error) {
	l := &Loop{client: client, param: param, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[string](), workqueue.TypedRateLimitingQueueConfig[string]{Name: "packing-param"})}
	enqueue := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { l.queue.Add(syncKey) },
		UpdateFunc: func(any, any) { l.queue.Add(syncKey) },
		DeleteFunc: func(any) { l.queue.Add(syncKey) },
	}
	ti := factory.Resource().V1().ResourceClaimTemplates()
	ci := factory.Resource().V1().DeviceClasses()
	for _, inf := range []cache.SharedIndexInformer{ti.Informer(), ci.Informer()} {
		if _, err := inf.AddEventHandler(enqueue); err != nil {
			return nil, fmt.Errorf("packing parameter: %w", err)
		}
	}
	l.templates, l.classes = ti.Lister(), ci.Lister()
	l.own = informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(param.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", param.Name).String()
		}))
	cmi := l.own.Core().V1().ConfigMaps().Informer()
	if _, err := cmi.AddEventHandler(enqueue); err != nil {
		return nil, fmt.Errorf("packing parameter: %w", err)
	}
	l.synced = []cache.InformerSynced{ti.Informer().HasSynced, ci.Informer().HasSynced, cmi.HasSynced}
	return l, nil
}

// Run works the queue until ctx ends. One worker: the key is one.
func (l *Loop) Run(ctx context.Context) {
	defer l.queue.ShutDown()
	logger := klog.FromContext(ctx).WithName("packing-param")
	ctx = klog.NewContext(ctx, logger)
	l.own.Start(ctx.Done())
	defer l.own.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), l.synced...) {
		return
	}
	// Once at start, so a parameter edited or deleted while no replica ran
	// is put right; after that the ConfigMap's own informer brings every
	// edit and deletion (a watch on one object, by name).
	l.queue.Add(syncKey)
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		<-ctx.Done()
		l.queue.ShutDown()
	})
	for l.next(ctx) {
	}
}

func (l *Loop) next(ctx context.Context) bool {
	key, quit := l.queue.Get()
	if quit {
		return false
	}
	defer l.queue.Done(key)
	if err := l.Sync(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Updating the packing parameter", "configMap", l.param)
		l.queue.AddRateLimited(key)
		return true
	}
	l.queue.Forget(key)
	return true
}

// Sync writes the parameter the informers' templates and classes call
// for, if it differs from the ConfigMap's.
func (l *Loop) Sync(ctx context.Context) error {
	templates, err := l.templates.List(labels.Everything())
	if err != nil {
		return err
	}
	classes, err := l.classes.List(labels.Everything())
	if err != nil {
		return err
	}
	data, left := Data(templates, deviceclass.Names(classes, deviceclass.SelectsGpufrac))
	logger := klog.FromContext(ctx)
	if left != l.left {
		// Said when it changes, not on every sync.
		logger.Info("Templates left to the packing webhook: not in the packing parameter", "left", left, "listed", len(data))
		l.left = left
	}
	cms := l.client.CoreV1().ConfigMaps(l.param.Namespace)
	cm, err := cms.Get(ctx, l.param.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: l.param.Name, Namespace: l.param.Namespace}, Data: data}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("another replica created ConfigMap %s first, retrying: %w", l.param, err)
		}
		if err == nil {
			logger.V(2).Info("Created the packing parameter", "templates", len(data))
		}
		return err
	case err != nil:
		return err
	}
	if maps.Equal(cm.Data, data) {
		return nil
	}
	cm.Data = data
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return err
	}
	logger.V(2).Info("Updated the packing parameter", "templates", len(data))
	return nil
}
