package nodeplugin

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpufrac/gpufrac/pkg/plan"
)

// eventReporter puts Prepare failures on the claim, where `kubectl describe
// resourceclaim` shows them next to the allocation.
type eventReporter struct {
	recorder events.EventRecorder
}

func newEventReporter(ctx context.Context, client kubernetes.Interface, nodeName string) *eventReporter {
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	return &eventReporter{recorder: broadcaster.NewRecorder(scheme.Scheme, "gpufrac-kubelet-plugin/"+nodeName)}
}

// DaemonRestarted tells a claim's users that the MPS server they joined
// died and was recreated: their CUDA contexts on it are lost.
func (r *eventReporter) DaemonRestarted(c *plan.Claim, reason string) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
	r.recorder.Eventf(claim, nil, v1.EventTypeWarning, "MPSDaemonRestarted", "RestartMPSDaemon", "%s", reason)
}

func (r *eventReporter) PrepareFailed(claim *resourceapi.ResourceClaim, err error) {
	r.recorder.Eventf(claim, nil, v1.EventTypeWarning, "PrepareFailed", "Prepare", "%s", err.Error())
}

// UnprepareFailed matters as much as a failed Prepare: until the kubelet's
// retry succeeds, the claim's share stays reserved on the GPU (and its MPS
// server running), and the pod stays Terminating.
func (r *eventReporter) UnprepareFailed(c kubeletplugin.NamespacedObject, err error) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
	r.recorder.Eventf(claim, nil, v1.EventTypeWarning, "UnprepareFailed", "Unprepare", "%s", err.Error())
}
