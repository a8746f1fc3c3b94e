// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
)

// A node server's GPU set is fixed when its Pod starts (allowed_devices,
// CUDA_VISIBLE_DEVICES), but the node's fraction GPUs may change under it:
// a GPU added, or its MIG mode turned on or off, while the plugin was down
// or while it ran. Bindings planned since list the node's GPUs now; the
// running server does not serve a GPU it was not started with. This file
// decides what to do with such a server.

// AnnotationServerGPUs is the daemon Pod's annotation that lists (sorted,
// comma-separated) the GPUs its server was started with. Set by the manager, not the
// template, so a replaced --mps-template cannot drop it; a restarted
// plugin reads it to know what a running server serves.
const AnnotationServerGPUs = "gpufrac.dev/server-gpus"

// serverSetAction is what Acquire does with a running server whose GPU set
// differs from the one its binding was planned with.
type serverSetAction int

const (
	// serverSetSame: the server serves the GPUs wanted.
	serverSetSame serverSetAction = iota
	// serverSetServe: the sets differ, claims hold the server, and every
	// GPU the new claim asks of it is in its set: it is served by the
	// server as it runs (never restarted under its tenants).
	serverSetServe
	// serverSetRestart: the sets differ and nothing holds the server: it
	// is restarted over the wanted set.
	serverSetRestart
	// serverSetRefuse: the sets differ, claims hold the server, and the
	// new claim asks for a GPU outside its set: refused until the server's
	// last claim is unprepared.
	serverSetRefuse
)

// decideServerSet is the pure part: running is the set the server runs
// with (nil: no server runs, or its set is unknown), wanted the set a
// server started now would serve, asked the GPUs the new claim has shares
// of on this server, and held whether claims (or a claim the preparer is
// uncertain of) use the server. It returns the action and the asked GPUs
// outside the running set.
func decideServerSet(running, wanted, asked []string, held bool) (serverSetAction, []string) {
	if running == nil || sameSet(running, wanted) {
		return serverSetSame, nil
	}
	if !held {
		return serverSetRestart, nil
	}
	var outside []string
	for _, g := range asked {
		if !slices.Contains(running, g) && !slices.Contains(outside, g) {
			outside = append(outside, g)
		}
	}
	if len(outside) > 0 {
		return serverSetRefuse, outside
	}
	return serverSetServe, nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// setDiff returns what b has that a lacks, and what a has that b lacks.
func setDiff(a, b []string) (added, removed []string) {
	for _, g := range b {
		if !slices.Contains(a, g) {
			added = append(added, g)
		}
	}
	for _, g := range a {
		if !slices.Contains(b, g) {
			removed = append(removed, g)
		}
	}
	return added, removed
}

// podServerGPUs is the set a daemon Pod's server was started with; nil
// where the Pod does not say (made by a plugin that predates the
// annotation).
func podServerGPUs(pod *corev1.Pod) []string {
	v := pod.Annotations[AnnotationServerGPUs]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// askedGPUs are the GPUs c has shares of on the daemon key names.
func askedGPUs(c *plan.Claim, key string) []string {
	var out []string
	for _, d := range c.Devices {
		if d.MPS != nil && d.MPS.DaemonKey() == key && !slices.Contains(out, d.GPU.UUID) {
			out = append(out, d.GPU.UUID)
		}
	}
	return out
}

// ServerGPUsError refuses a claim a node server that runs over an older
// GPU set cannot serve: the field, the value and the rule.
type ServerGPUsError struct {
	// Running is the server's GPU set, Wanted the node's fraction GPUs
	// now, Outside the claim's GPUs the server does not serve.
	Running, Wanted, Outside []string
	// Holders name the claims (namespace/name) that keep the server.
	Holders []string
}

func (e *ServerGPUsError) Error() string {
	return fmt.Sprintf("allowed_devices: the MPS node server runs over GPUs [%s] (started before the node's fraction GPUs became [%s]) and does not serve GPU %s this claim has a share of; "+
		"a node server's GPUs change only when it restarts, and it is not restarted under the %d claims that use it (%s): the claim is retried, and served once they are unprepared",
		strings.Join(e.Running, ","), strings.Join(e.Wanted, ","), strings.Join(e.Outside, ","), len(e.Holders), strings.Join(e.Holders, ", "))
}

// podRead is a daemon Pod read earlier under the daemon's key lock; pod
// nil: there was none.
type podRead struct{ pod *corev1.Pod }

// get returns the Pod as read, or reads it where r is nil; a Pod read as
// absent answers NotFound as the API server would.
func (r *podRead) get(ctx context.Context, pods typedcorev1.PodInterface, name string) (*corev1.Pod, error) {
	switch {
	case r == nil:
		return pods.Get(ctx, name, metav1.GetOptions{})
	case r.pod == nil:
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return r.pod, nil
}

// checkServerSet compares, before a new claim c joins it, the running
// server of binding b with the set b was planned with, and restarts an
// unheld server over the new set or refuses a GPU an held one does not
// serve. Under the daemon's key lock; per-GPU daemons have nothing to
// compare (nil read: ensure reads their Pod). It returns the Pod as it
// left it, for ensure.
func (m *Manager) checkServerSet(ctx context.Context, b mpslayout.Binding, c *plan.Claim) (*podRead, error) {
	key := b.DaemonKey()
	if key != mpslayout.NodeServerKey {
		return nil, nil
	}
	pods := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace)
	pod, err := pods.Get(ctx, PodName(m.cfg.NodeName, key), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return &podRead{}, nil
	case err != nil:
		return nil, fmt.Errorf("looking up the MPS node server: %w", err)
	}
	m.mu.Lock()
	var holders []string
	var fallback []string
	for uid, u := range m.users[key] {
		if uid == c.UID {
			continue
		}
		holders = append(holders, u.claim.Namespace+"/"+u.claim.Name)
		if ub := u.claim.MPS(); ub != nil && fallback == nil {
			fallback = ub.ServerGPUs
		}
	}
	m.mu.Unlock()
	slices.Sort(holders)
	held := len(holders) > 0
	if !held && m.cfg.KeepUnused != nil {
		if reason := m.cfg.KeepUnused(); reason != "" {
			held, holders = true, []string{"unknown: " + reason}
		}
	}
	running := podServerGPUs(pod)
	if running == nil {
		// A Pod that does not say: its claims' bindings do.
		running = fallback
	}
	action, outside := decideServerSet(running, b.ServerGPUs, askedGPUs(c, key), held)
	logger := klog.FromContext(ctx).WithValues("running", running, "wanted", b.ServerGPUs, "claim", klog.KRef(c.Namespace, c.Name))
	switch action {
	case serverSetRestart:
		logger.Info("Restarting the MPS node server over the node's fraction GPUs now: no claim uses it")
		// nil: ensure reads what stands there now (a successor made
		// meanwhile, or nothing).
		return nil, m.deleteAndWait(ctx, b, pod)
	case serverSetRefuse:
		logger.Info("Refusing a claim on a GPU the MPS node server does not serve; the server keeps its claims", "outside", outside, "holders", holders)
		return nil, &ServerGPUsError{Running: running, Wanted: b.ServerGPUs, Outside: outside, Holders: holders}
	case serverSetServe:
		logger.V(2).Info("The MPS node server runs over an older GPU set that holds this claim's GPUs; serving it there")
	}
	return &podRead{pod: pod}, nil
}

// deleteAndWait deletes the daemon Pod (that very Pod) and waits, within
// ReadyTimeout, until it is gone, then removes its pipe, shm and config
// directories as stop does, so that ensure creates its successor afresh.
func (m *Manager) deleteAndWait(ctx context.Context, b mpslayout.Binding, pod *corev1.Pod) error {
	pods := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace)
	if pod.DeletionTimestamp == nil {
		uid := pod.UID
		err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting MPS daemon %s/%s to restart it over new GPUs: %w", pod.Namespace, pod.Name, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ReadyTimeout)
	defer cancel()
	gone := poll(ctx, 50*time.Millisecond, func(ctx context.Context) bool {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && p.UID != pod.UID)
	})
	if !gone {
		return fmt.Errorf("MPS daemon %s/%s is being restarted over new GPUs and has not stopped yet; retry shortly", pod.Namespace, pod.Name)
	}
	// Orphaned pipe directories keep a new daemon from starting (stop).
	for _, dir := range []string{b.PipeDir, b.ShmDir, ConfigDir(b)} {
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("removing MPS directory %s: %w", dir, err)
		}
	}
	return nil
}

// reportServerSet says, at a restore, that the node server runs over GPUs
// other than the node's fraction GPUs now and keeps them for the claims
// that use it: new claims on the other GPUs are refused until those are
// unprepared. A server no claim uses is collected by reconcile, and the
// next claim starts it over the new set.
func (m *Manager) reportServerSet(ctx context.Context) {
	if m.cfg.NodeServerGPUs == nil {
		return
	}
	m.mu.Lock()
	var holders []types.UID
	for uid := range m.users[mpslayout.NodeServerKey] {
		holders = append(holders, uid)
	}
	m.mu.Unlock()
	if len(holders) == 0 {
		return
	}
	pod, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, PodName(m.cfg.NodeName, mpslayout.NodeServerKey), metav1.GetOptions{})
	if err != nil {
		return
	}
	running, wanted := podServerGPUs(pod), m.cfg.NodeServerGPUs()
	if running == nil || sameSet(running, wanted) {
		return
	}
	added, removed := setDiff(running, wanted)
	klog.FromContext(ctx).Info("The node's fraction GPUs changed since the MPS node server started; it keeps serving its claims over its old GPUs, and new MPS claims on GPUs outside them are refused until those claims are unprepared (drain the node's MPS pods to switch now)",
		"pod", klog.KObj(pod), "running", running, "wanted", wanted, "added", added, "removed", removed, "claims", len(holders))
}
