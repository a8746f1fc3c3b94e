// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin

import (
	"context"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/claimstatus"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// eventReporter puts Prepare failures on the claim, where `kubectl describe
// resourceclaim` shows them next to the allocation.
type eventReporter struct {
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder
	// status carries the MPS server's state into the claim's
	// status.devices conditions.
	status *claimstatus.Writer
}

func newEventReporter(ctx context.Context, client kubernetes.Interface, nodeName string, status *claimstatus.Writer) *eventReporter {
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	broadcaster.StartRecordingToSink(ctx.Done())
	return &eventReporter{broadcaster: broadcaster, recorder: broadcaster.NewRecorder(scheme.Scheme, "gpufrac-kubelet-plugin/"+nodeName), status: status}
}

// shutdown stops the broadcaster's goroutines; events recorded after it
// are dropped.
func (r *eventReporter) shutdown() { r.broadcaster.Shutdown() }

func claimRef(c *plan.Claim) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
}

// DaemonRestarted tells a claim's users that the MPS server they joined
// died and was recreated: their CUDA contexts on it are lost. The Event is
// for people; the MPSServerReady=False condition is for controllers that
// restart such pods.
func (r *eventReporter) DaemonRestarted(c *plan.Claim, reason string) {
	r.recorder.Eventf(claimRef(c), nil, v1.EventTypeWarning, "MPSDaemonRestarted", "RestartMPSDaemon", "%s", reason)
	r.status.MPSServerState(c, domain.MPSServer{Reason: "DaemonRestarted", Message: reason, Since: time.Now()})
}

// DaemonRecovered: the recreated server accepts clients again.
func (r *eventReporter) DaemonRecovered(c *plan.Claim) {
	r.recorder.Eventf(claimRef(c), nil, v1.EventTypeNormal, "MPSDaemonReady", "RestartMPSDaemon", "the recreated MPS daemon is ready; restart the claim's containers to reconnect")
	r.status.MPSServerState(c, domain.MPSServer{Ready: true, Reason: "DaemonReady",
		Message: "the recreated MPS daemon is ready; containers that used the old one must restart", Since: time.Now()})
}

// maxNoteBytes is the events.k8s.io/v1 limit on an Event's note
// (documented on Event.Note: "Maximal length of the note is 1kB"); a
// longer one is refused by the API server and the Event lost, so errors
// built from a hostile claim are cut to it, saying how much was left out.
const maxNoteBytes = 1024

func (r *eventReporter) PrepareFailed(claim *resourceapi.ResourceClaim, err error) {
	r.recorder.Eventf(claim, nil, v1.EventTypeWarning, "PrepareFailed", "Prepare", "%s", safetext.Cap(err.Error(), maxNoteBytes))
}

// CDISpecRestored tells the claim's users that its CDI spec was missing at
// the plugin's start (the CDI root is often a tmpfs, or someone removed
// it), or did not parse, and was written again from the checkpoint:
// containers of the claim that (re)started meanwhile failed to be created.
func (r *eventReporter) CDISpecRestored(c *plan.Claim, path, why string) {
	r.recorder.Eventf(claimRef(c), nil, v1.EventTypeNormal, "CDISpecRestored", "Recover",
		"the CDI spec %s of this claim %s at the kubelet plugin's start; written again from its checkpoint", path, safetext.Cap(why, 512))
}

// UnprepareFailed matters as much as a failed Prepare: until the kubelet's
// retry succeeds, the claim's share stays reserved on the GPU (and its MPS
// server running), and the pod stays Terminating.
func (r *eventReporter) UnprepareFailed(c kubeletplugin.NamespacedObject, err error) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: c.Namespace, Name: c.Name, UID: c.UID}}
	r.recorder.Eventf(claim, nil, v1.EventTypeWarning, "UnprepareFailed", "Unprepare", "%s", safetext.Cap(err.Error(), maxNoteBytes))
}

// EnforcementReduced tells the node's users why it enforces less than its
// driver could, naming what to fix (e.g. the cgroup whose
// cgroup.subtree_control lacks +dmem): the slices say it too, cut to an
// attribute's 64 characters.
func (r *eventReporter) EnforcementReduced(nodeName string, enforcement domain.Enforcement, note string) {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: types.UID(nodeName)}}
	r.recorder.Eventf(node, nil, v1.EventTypeWarning, "GPUMemoryEnforcementReduced", "Discover",
		"%s", safetext.Cap(fmt.Sprintf("gpufrac advertises memoryEnforcement %s on this node: %s; enable it from the cgroup root down the kubelet's pod cgroups and restart gpufrac-kubelet-plugin", enforcement, note), maxNoteBytes))
}

// MIGInstanceLost tells a prepared claim's owners that the MIG instance
// its containers were given is no longer configured on the node (the MIG
// layout changed under them): gpufrac does not drop the claim, and its
// containers keep whatever the driver left them.
func (r *eventReporter) MIGInstanceLost(c *plan.Claim, device, uuid, profile string) {
	r.recorder.Eventf(claimRef(c), nil, v1.EventTypeWarning, "MIGInstanceLost", "WatchMIGLayout",
		"MIG instance %s (%s, %s) of this prepared claim is no longer configured on the node; its containers lost it: delete and recreate the pod to get an instance of the current layout", device, profile, uuid)
}

// FractionGPULost tells a prepared claim's owners that the GPU its share
// is on had its MIG mode turned on under them: the GPU now offers MIG
// instances and no fractions, and the share's limits and MPS route no
// longer describe it. gpufrac does not drop the claim.
func (r *eventReporter) FractionGPULost(c *plan.Claim, device, uuid string) {
	r.recorder.Eventf(claimRef(c), nil, v1.EventTypeWarning, "FractionGPULost", "WatchMIGLayout",
		"GPU %s (%s) of this prepared claim had its MIG mode turned on and no longer serves fractions; its containers lost their share: delete and recreate the pod to get a share of a GPU that serves fractions", device, uuid)
}
