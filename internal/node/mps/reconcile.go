// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
)

// The reconcile loop: daemons no claim uses are collected, daemons that
// stopped under their claims are recreated.

// reconcile deletes daemons no claim uses (left by a crash or an
// upgrade) and recreates daemons that died while claims use them.
func (m *Manager) reconcile(ctx context.Context) error {
	pods, err := m.daemons(ctx)
	if err != nil {
		return fmt.Errorf("listing MPS daemons: %w", err)
	}
	running := map[string]*corev1.Pod{}
	for i := range pods {
		running[pods[i].Labels[LabelGPU]] = &pods[i]
	}
	m.mu.Lock()
	users := map[string][]user{}
	logs := map[string]string{}
	for key, us := range m.users {
		for _, u := range us {
			users[key] = append(users[key], u)
			if b := u.claim.MPS(); b != nil {
				logs[key] = b.LogDir
			}
		}
	}
	m.mu.Unlock()
	m.noteListed(running)
	m.scanEvictions(ctx, logs)

	errs := m.collectUnused(ctx, running, users)
	errs = append(errs, m.restoreUsed(ctx, running, users)...)
	return errors.Join(errs...)
}

// collectUnused deletes the running daemons no claim uses, unless
// the preparer is uncertain of its claims (KeepUnused) or the daemon is
// still starting for a Prepare the kubelet will retry.
func (m *Manager) collectUnused(ctx context.Context, running map[string]*corev1.Pod, users map[string][]user) []error {
	logger := klog.FromContext(ctx)
	var errs []error
	keep := ""
	if m.cfg.KeepUnused != nil {
		keep = m.cfg.KeepUnused()
	}
	for key, pod := range running {
		if len(users[key]) > 0 {
			continue
		}
		if keep != "" {
			logger.Info("Keeping an MPS daemon no known claim uses", "pod", klog.KObj(pod), "daemon", key, "reason", keep)
			continue
		}
		if time.Since(pod.CreationTimestamp.Time) < m.cfg.ReadyTimeout {
			// Still starting for a Prepare the kubelet will retry.
			continue
		}
		if m.beforeCollect != nil {
			m.beforeCollect(key)
		}
		deleted, err := m.collect(ctx, key, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if deleted {
			logger.Info("Deleted an MPS daemon no claim uses", "pod", klog.KObj(pod), "daemon", key)
		}
	}
	return errs
}

// restoreUsed recreates the daemons that stopped while claims use them,
// telling those claims (events) that theirs was recreated, and again once
// it is ready.
func (m *Manager) restoreUsed(ctx context.Context, running map[string]*corev1.Pod, users map[string][]user) []error {
	logger := klog.FromContext(ctx)
	var errs []error
	for key, us := range users {
		pod := running[key]
		if pod != nil && pod.DeletionTimestamp == nil && pod.Status.Phase != corev1.PodFailed && pod.Status.Phase != corev1.PodSucceeded {
			if m.restarted[key] && podReady(pod) {
				delete(m.restarted, key)
				logger.Info("A recreated MPS daemon is ready", "daemon", key, "claims", len(us))
				if m.cfg.Events != nil {
					for _, u := range us {
						m.cfg.Events.DaemonRecovered(&u.claim)
					}
				}
			}
			continue
		}
		reason := "the MPS daemon of " + daemonName(key) + " is gone"
		if pod != nil {
			reason = fmt.Sprintf("the MPS daemon of %s stopped (%s)", daemonName(key), describePod(pod))
		}
		created, err := m.recreate(ctx, us[0].claim, key, pod)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !created {
			continue
		}
		m.restarted[key] = true
		logger.Info("Recreated an MPS daemon claims depend on", "daemon", key, "claims", len(us), "reason", reason)
		if m.cfg.Events != nil {
			for _, u := range us {
				m.cfg.Events.DaemonRestarted(&u.claim, reason+"; it was recreated, and its clients must reconnect")
			}
		}
	}
	return errs
}

// collect deletes pod, the daemon key names, if it is still unused. The
// check is repeated under the daemon's lock, which Acquire holds while it
// hands the daemon out: the users seen before taking the lock may be out
// of date. The deletion is of that very Pod (its UID), not of a
// successor with the same name.
func (m *Manager) collect(ctx context.Context, key string, pod *corev1.Pod) (bool, error) {
	m.locks.LockKey(key)
	defer func() { _ = m.locks.UnlockKey(key) }()
	m.mu.Lock()
	used := len(m.users[key]) > 0
	m.mu.Unlock()
	if used {
		return false, nil
	}
	uid := pod.UID
	err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil // gone already, or replaced by a new daemon
	default:
		return false, fmt.Errorf("deleting unused MPS daemon %s: %w", pod.Name, err)
	}
}

// recreate replaces a dead daemon; it reports whether a new Pod was
// created (a stopped one is deleted first, and replaced on a later pass
// because the new Pod takes the same name).
func (m *Manager) recreate(ctx context.Context, c plan.Claim, key string, old *corev1.Pod) (bool, error) {
	m.locks.LockKey(key)
	defer func() { _ = m.locks.UnlockKey(key) }()
	b := c.MPS()
	m.mu.Lock()
	used := len(m.users[key]) > 0
	m.mu.Unlock()
	if b == nil || !used {
		// Released since reconcile looked: nothing to bring back.
		return false, nil
	}
	if old != nil {
		if old.DeletionTimestamp == nil {
			uid := old.UID
			err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
			if err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deleting stopped MPS daemon %s: %w", old.Name, err)
			}
		}
		return false, nil
	}
	// The watch's cache may not show a daemon an Acquire just created:
	// only the API can say it is gone.
	if _, err := m.cfg.Client.CoreV1().Pods(m.cfg.Namespace).Get(ctx, PodName(m.cfg.NodeName, key), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return false, err
	}
	m.mu.Lock()
	file, content := desired(m.cfg.Version, m.users[key])
	m.mu.Unlock()
	nb := *b
	if key == mpslayout.NodeServerKey && m.cfg.NodeServerGPUs != nil {
		// Its clients lost it and must reconnect anyway: a recreated node
		// server serves the node's fraction GPUs as they are now.
		if now := m.cfg.NodeServerGPUs(); len(now) > 0 {
			nb.ServerGPUs = now
		}
	}
	if _, err := m.create(ctx, nb, file, content); err != nil {
		return false, err
	}
	return true, nil
}
