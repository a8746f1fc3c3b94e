// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package incident

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// Conditions sets a condition on one share's status.devices entry of a
// claim (internal/node/claimstatus.Writer implements it).
type Conditions interface {
	SetShareCondition(ctx context.Context, namespace, name string, uid, pool, device, shareID string, cond metav1.Condition) error
}

// ShareCounter counts incident starts per prepared share
// (gpufrac_fraction_incidents_total; internal/node/fractionmetrics.Collector
// implements it).
type ShareCounter interface {
	CountShareIncident(s Share, kind Kind)
}

// Emitter makes incidents visible. Recorder, Conditions and Shares may be
// nil (a plugin without API access still counts).
type Emitter struct {
	Recorder   events.EventRecorder
	Conditions Conditions
	Counter    *prometheus.CounterVec
	Shares     ShareCounter
}

// NewCounter is gpufrac_incidents_total{node, kind, gpu_uuid}: bounded
// labels (kinds x GPUs of the node), so a churn of pods leaves no series
// behind; the Events name the pods.
func NewCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpufrac_incidents_total",
		Help: "GPU memory incidents by kind: containers at their hard limit, borrowing above their request, MPS clients evicted, terminated or refused while the GPU waits for clients a fatal exception ended.",
	}, []string{"node", "kind", "gpu_uuid"})
}

// StartAtZero writes every kind of every GPU at 0, so that the first
// incident of a kind on a GPU is an increase() a dashboard or an alert
// sees: a series that appears at 1 reads as no change.
func StartAtZero(counter *prometheus.CounterVec, node string, gpuUUIDs []string) {
	for _, gpu := range gpuUUIDs {
		for _, kind := range Kinds {
			counter.WithLabelValues(node, string(kind), gpu)
		}
	}
}

// Emit records one transition: a start makes a Warning Event on the claim
// and on the pod, sets the condition True and counts; an end sets the
// condition False. Failures are logged: an incident must never fail the
// plugin.
func (e *Emitter) Emit(ctx context.Context, inc Incident) {
	logger := klog.FromContext(ctx)
	msg := inc.Message()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: inc.Share.ClaimNamespace, Name: inc.Share.ClaimName, UID: inc.Share.ClaimUID}}
	var pod *v1.Pod
	if inc.Container.Pod != "" {
		pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: inc.Container.Namespace, Name: inc.Container.Pod}}
	}
	if inc.Active {
		logger.Info("GPU memory incident", "kind", inc.Kind, "claim", klog.KObj(claim), "gpu", inc.Share.GPUUUID, "message", msg)
		if e.Counter != nil {
			e.Counter.WithLabelValues(inc.Node, string(inc.Kind), inc.Share.GPUUUID).Inc()
		}
		if e.Shares != nil {
			e.Shares.CountShareIncident(inc.Share, inc.Kind)
		}
		switch {
		case e.Recorder == nil:
		case pod != nil:
			e.Recorder.Eventf(claim, pod, v1.EventTypeWarning, string(inc.Kind), "Observe", "%s", msg)
			e.Recorder.Eventf(pod, claim, v1.EventTypeWarning, string(inc.Kind), "Observe", "%s", msg)
		default:
			e.Recorder.Eventf(claim, nil, v1.EventTypeWarning, string(inc.Kind), "Observe", "%s", msg)
		}
	}
	if e.Conditions == nil {
		return
	}
	status := metav1.ConditionFalse
	reason := "Cleared"
	if inc.Active {
		status, reason = metav1.ConditionTrue, "Observed"
	}
	switch inc.Kind {
	case MPSEvicted, MPSTerminated:
		reason = "Terminated"
	case MPSWedged:
		reason = "Refused"
	}
	cond := metav1.Condition{Type: string(inc.Kind), Status: status, Reason: reason, Message: truncate(msg), LastTransitionTime: metav1.NewTime(inc.Time)}
	if err := e.Conditions.SetShareCondition(ctx, inc.Share.ClaimNamespace, inc.Share.ClaimName, string(inc.Share.ClaimUID),
		inc.Share.Pool, inc.Share.Device, inc.Share.ShareID, cond); err != nil {
		logger.Error(err, "Setting the incident's condition failed", "kind", inc.Kind, "claim", klog.KObj(claim))
	}
}

// truncate keeps a condition message within the API's 32768 bytes.
func truncate(s string) string {
	const limit = 32768
	if len(s) > limit {
		return s[:limit]
	}
	return s
}
