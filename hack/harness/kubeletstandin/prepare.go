// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletstandin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/util/retry"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

// prepare resolves the pod's claims, checks them as the kubelet does
// (allocated, reserved for this pod, only drivers registered here), records
// the pod as a user of each, and asks the plugin to prepare those not yet
// prepared. It returns the prepared claims by name.
func (s *StandIn) prepare(ctx context.Context, pod *v1.Pod) (map[string]PreparedClaim, error) {
	logger := klog.FromContext(ctx)
	var claims []*drapb.Claim
	names := make([]*string, 0, len(pod.Spec.ResourceClaims)+1)
	owned := make([]bool, 0, cap(names))
	for i := range pod.Spec.ResourceClaims {
		name, mustCheckOwner, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[i])
		if err != nil {
			return nil, err // e.g. the claim controller has not created it yet
		}
		names, owned = append(names, name), append(owned, mustCheckOwner)
	}
	// The claim the scheduler made for extended resources a DeviceClass
	// maps (KEP-5004), as the kubelet reads it from the pod's status; it is
	// owned by the pod.
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		names, owned = append(names, &st.ResourceClaimName), append(owned, true)
	}
	for i, name := range names {
		mustCheckOwner := owned[i]
		if name == nil {
			continue
		}
		claim, err := s.cfg.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("fetch ResourceClaim %s: %w", *name, err)
		}
		if mustCheckOwner {
			if err := resourceclaim.IsForPod(pod, claim, false); err != nil {
				return nil, err
			}
		}
		if !resourceclaim.IsReservedForPod(pod, claim, false) {
			return nil, fmt.Errorf("pod %s (%s) is not allowed to use ResourceClaim %s (%s)", pod.Name, pod.UID, claim.Name, claim.UID)
		}
		if claim.Status.Allocation == nil {
			return nil, fmt.Errorf("ResourceClaim %s is not allocated", claim.Name)
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Driver != s.cfg.DriverName {
				return nil, fmt.Errorf("ResourceClaim %s: DRA driver %s is not registered on node %s", claim.Name, r.Driver, s.cfg.NodeName)
			}
		}
		claims = append(claims, &drapb.Claim{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)})
	}

	if len(claims) == 0 {
		// Nothing to prepare, and no lock to take: a pod without claims
		// (an MPS daemon the plugin waits for inside a prepare) must not
		// queue behind the prepare that waits for it.
		return map[string]PreparedClaim{}, nil
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	key := pod.Namespace + "/" + pod.Name
	var todo []*drapb.Claim
	s.mu.Lock()
	// Reference before calling the plugin, as the kubelet checkpoints
	// before NodePrepareResources: a pod deleted while (or after) its
	// prepare failed still gets NodeUnprepareResources for its claims.
	s.state[key] = &podState{uid: pod.UID, claims: claims}
	for _, c := range claims {
		cs := s.claims[types.UID(c.Uid)]
		if cs == nil {
			cs = &claimState{claim: c, users: sets.New[types.UID]()}
			s.claims[types.UID(c.Uid)] = cs
		}
		cs.users.Insert(pod.UID)
		if cs.prepared == nil {
			todo = append(todo, c)
		}
	}
	s.mu.Unlock()

	if len(todo) > 0 {
		start := time.Now()
		resp, err := s.client().prepare(ctx, todo)
		if err != nil {
			return nil, err
		}
		var errs []error
		s.mu.Lock()
		for _, c := range todo {
			result, ok := resp.Claims[c.Uid]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("NodePrepareResources skipped ResourceClaim %s", c.Name))
			case result.GetError() != "":
				errs = append(errs, fmt.Errorf("NodePrepareResources failed for ResourceClaim %s: %s", c.Name, result.Error))
			default:
				pc := &PreparedClaim{Namespace: c.Namespace, Name: c.Name, UID: types.UID(c.Uid)}
				for _, d := range result.GetDevices() {
					pc.Devices = append(pc.Devices, PreparedDevice{
						RequestNames: d.RequestNames, Pool: d.PoolName, Device: d.DeviceName,
						ShareID: d.GetShareId(), CDIDeviceIDs: d.CdiDeviceIds,
					})
				}
				s.claims[types.UID(c.Uid)].prepared = pc
			}
		}
		for uid := range resp.Claims {
			if !slices.ContainsFunc(todo, func(c *drapb.Claim) bool { return c.Uid == uid }) {
				errs = append(errs, fmt.Errorf("NodePrepareResources returned a result for unknown claim UID %s", uid))
			}
		}
		s.mu.Unlock()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		logger.V(2).Info("Claims prepared", "pod", klog.KObj(pod), "claims", len(todo), "duration", time.Since(start))
	}

	out := make(map[string]PreparedClaim, len(claims))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range claims {
		out[c.Name] = *s.claims[types.UID(c.Uid)].prepared
	}
	return out, nil
}

// setRunning writes the status a kubelet writes once every container
// started: phase Running, Ready, started container statuses.
func (s *StandIn) setRunning(ctx context.Context, pod *v1.Pod, rec *PodRecord) error {
	started := metav1.NewTime(rec.StartedAt)
	return s.updateStatus(ctx, pod, func(status *v1.PodStatus, spec *v1.PodSpec) {
		status.Phase = v1.PodRunning
		status.HostIP, status.HostIPs = "127.0.0.1", []v1.HostIP{{IP: "127.0.0.1"}}
		status.StartTime = &started
		status.Message, status.Reason = "", ""
		for _, t := range []v1.PodConditionType{v1.PodReadyToStartContainers, v1.PodInitialized, v1.ContainersReady, v1.PodReady} {
			setCondition(status, t, v1.ConditionTrue, "", "")
		}
		status.InitContainerStatuses = nil
		for _, c := range spec.InitContainers {
			status.InitContainerStatuses = append(status.InitContainerStatuses, v1.ContainerStatus{
				Name: c.Name, Image: c.Image, ContainerID: containerID(pod, c.Name), Ready: true,
				State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{Reason: "Completed", StartedAt: started, FinishedAt: started}},
			})
		}
		status.ContainerStatuses = nil
		for _, c := range spec.Containers {
			status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{
				Name: c.Name, Image: c.Image, ContainerID: containerID(pod, c.Name), Ready: true, Started: new(true),
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: started}},
			})
		}
	})
}

// setWaiting writes the status of a pod whose containers cannot be created
// yet: Pending, each container Waiting with reason and message.
func (s *StandIn) setWaiting(ctx context.Context, pod *v1.Pod, reason, message string) error {
	return s.updateStatus(ctx, pod, func(status *v1.PodStatus, spec *v1.PodSpec) {
		status.Phase = v1.PodPending
		status.HostIP, status.HostIPs = "127.0.0.1", []v1.HostIP{{IP: "127.0.0.1"}}
		setCondition(status, v1.PodReadyToStartContainers, v1.ConditionFalse, "", "")
		setCondition(status, v1.ContainersReady, v1.ConditionFalse, "ContainersNotReady", "containers with unready status")
		setCondition(status, v1.PodReady, v1.ConditionFalse, "ContainersNotReady", "containers with unready status")
		status.ContainerStatuses = nil
		for _, c := range spec.Containers {
			status.ContainerStatuses = append(status.ContainerStatuses, v1.ContainerStatus{
				Name: c.Name, Image: c.Image, Started: new(false),
				State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason, Message: message}},
			})
		}
	})
}

func containerID(pod *v1.Pod, name string) string {
	return "standin://" + string(pod.UID) + "/" + name
}

func setCondition(status *v1.PodStatus, typ v1.PodConditionType, value v1.ConditionStatus, reason, message string) {
	for i := range status.Conditions {
		c := &status.Conditions[i]
		if c.Type == typ {
			if c.Status != value {
				c.LastTransitionTime = metav1.Now()
			}
			c.Status, c.Reason, c.Message = value, reason, message
			return
		}
	}
	status.Conditions = append(status.Conditions, v1.PodCondition{
		Type: typ, Status: value, Reason: reason, Message: message, LastTransitionTime: metav1.Now(),
	})
}

// updateStatus applies mutate to the pod's current status and writes it,
// unless nothing changed; conflicts are retried on a fresh copy.
func (s *StandIn) updateStatus(ctx context.Context, pod *v1.Pod, mutate func(*v1.PodStatus, *v1.PodSpec)) error {
	pods := s.cfg.Client.CoreV1().Pods(pod.Namespace)
	current := pod
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		updated := current.DeepCopy()
		mutate(&updated.Status, &updated.Spec)
		if statusEqual(&current.Status, &updated.Status) {
			return nil
		}
		_, err := pods.UpdateStatus(ctx, updated, metav1.UpdateOptions{})
		if err != nil {
			if fresh, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{}); gerr == nil && fresh.UID == pod.UID {
				current = fresh
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("updating the status of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// statusEqual ignores condition transition times, so that a retry that
// changes nothing writes nothing.
func statusEqual(a, b *v1.PodStatus) bool {
	if a.Phase != b.Phase || len(a.Conditions) != len(b.Conditions) || len(a.ContainerStatuses) != len(b.ContainerStatuses) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	for i := range a.ContainerStatuses {
		x, y := a.ContainerStatuses[i].State, b.ContainerStatuses[i].State
		if (x.Waiting == nil) != (y.Waiting == nil) || (x.Running == nil) != (y.Running == nil) {
			return false
		}
		if x.Waiting != nil && (x.Waiting.Reason != y.Waiting.Reason || x.Waiting.Message != y.Waiting.Message) {
			return false
		}
	}
	return true
}
