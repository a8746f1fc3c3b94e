package webhook

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// InformerCluster serves Cluster from shared informers.
type InformerCluster struct {
	slices  resourcelisters.ResourceSliceLister
	classes resourcelisters.DeviceClassLister
	synced  []cache.InformerSynced
}

// NewInformerCluster registers the informers it needs with factory; start
// the factory and call WaitForSync before serving.
func NewInformerCluster(factory informers.SharedInformerFactory) *InformerCluster {
	s := factory.Resource().V1().ResourceSlices()
	c := factory.Resource().V1().DeviceClasses()
	return &InformerCluster{
		slices: s.Lister(), classes: c.Lister(),
		synced: []cache.InformerSynced{s.Informer().HasSynced, c.Informer().HasSynced},
	}
}

// WaitForSync blocks until the caches are filled; a webhook that answered
// from an empty cache would refuse every gpu-fraction pod.
func (c *InformerCluster) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for the ResourceSlice and DeviceClass caches: %w", ctx.Err())
	}
	return nil
}

// GPUMemorySizes implements Cluster.
func (c *InformerCluster) GPUMemorySizes() []resource.Quantity {
	all, err := c.slices.List(labels.Everything())
	if err != nil {
		return nil
	}
	var sizes []resource.Quantity
	for _, s := range all {
		if s.Spec.Driver != v1alpha1.DriverName {
			continue
		}
		for _, d := range s.Spec.Devices {
			capacity, ok := d.Capacity["memory"]
			if !ok || slices.ContainsFunc(sizes, func(q resource.Quantity) bool { return q.Cmp(capacity.Value) == 0 }) {
				continue
			}
			sizes = append(sizes, capacity.Value)
		}
	}
	return sizes
}

// DeviceClasses implements Cluster.
func (c *InformerCluster) DeviceClasses() []*resourceapi.DeviceClass {
	all, err := c.classes.List(labels.Everything())
	if err != nil {
		return nil
	}
	return all
}

// EventRecorder records translations as Events on the pod.
type EventRecorder struct {
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
}

// NewEventRecorder starts an events broadcaster until ctx ends.
func NewEventRecorder(ctx context.Context, client kubernetes.Interface) *EventRecorder {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	b.StartRecordingToSink(ctx.Done())
	return &EventRecorder{broadcaster: b, recorder: b.NewRecorder(scheme.Scheme, "gpufrac-controller")}
}

// Shutdown stops the recorder's goroutines; later events are dropped.
func (r *EventRecorder) Shutdown() { r.broadcaster.Shutdown() }

// Translated implements Events.
func (r *EventRecorder) Translated(pod *corev1.Pod, templates []string) {
	if pod.Name == "" {
		// A generateName pod has no name yet; the event would name nothing.
		klog.Background().V(2).Info("Translated a pod without a name yet", "generateName", pod.GenerateName, "templates", templates)
		return
	}
	r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, "KAIAnnotationsTranslated", "Translate",
		"KAI GPU-sharing annotations became ResourceClaimTemplates %v", templates)
}
