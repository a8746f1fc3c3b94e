// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletstandin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// The stand-in runs no containers, with one exception: the MPS control
// daemon Pods the plugin creates, whose script is the product (it answers
// the plugin through the config directory). With Config.MPSToolsDir they
// run as host processes, their hostPath volumes standing in for their
// mounts: each container's gpufrac-mps-launcher (the image's path mapped
// to the build in MPSToolsDir) chroots into the node's driver root, where
// test/mpsdouble is nvidia-cuda-mps-control and nvidia-smi, so the demo
// and the integration tests exercise the production path and the
// daemon's whole lifecycle: init container, start, startup probe gating
// Ready, the plugin's settings applied, SIGTERM on deletion.
const mpsDaemonComponent = "gpufrac-mps-control-daemon"

// hostProcess is a pod's main container running on the host.
type hostProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

func (s *StandIn) runsOnHost(pod *v1.Pod) bool {
	return s.cfg.MPSToolsDir != "" && pod.Labels["app.kubernetes.io/component"] == mpsDaemonComponent
}

// hostEnv is the container's environment with each value that names a
// mount path replaced by the host path behind it.
func (s *StandIn) hostEnv(pod *v1.Pod, c *v1.Container) []string {
	hostPaths := map[string]string{}
	for _, v := range pod.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		if p, ok := hostPaths[m.Name]; ok {
			mounts[m.MountPath] = p
		}
	}
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		v := e.Value
		if p, ok := mounts[v]; ok {
			v = p
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// command is the container's argv; a program found by its base name
// among the MPS tools (the image's /usr/local/bin/gpufrac-mps-launcher)
// resolves there, as the image would have it.
func (s *StandIn) command(c *v1.Container) []string {
	return s.resolve(append(append([]string{}, c.Command...), c.Args...))
}

func (s *StandIn) resolve(argv []string) []string {
	argv = slices.Clone(argv)
	if p := filepath.Join(s.cfg.MPSToolsDir, filepath.Base(argv[0])); fileExists(p) {
		argv[0] = p
	}
	return argv
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// startOnHost runs the init containers, starts the main container and
// waits until its startup probe passes, as the kubelet would before it
// marks the Pod Ready.
func (s *StandIn) startOnHost(ctx context.Context, key string, pod *v1.Pod) error {
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		argv := s.command(c)
		run := exec.CommandContext(ctx, argv[0], argv[1:]...)
		run.Env = s.hostEnv(pod, c)
		if out, err := run.CombinedOutput(); err != nil {
			return fmt.Errorf("init container %s: %w: %s", c.Name, err, out)
		}
	}
	c := &pod.Spec.Containers[0]
	argv := s.command(c)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.hostEnv(pod, c)
	if s.cfg.RecordDir != "" {
		if f, err := os.Create(filepath.Join(s.cfg.RecordDir, pod.Namespace+"_"+pod.Name+".log")); err == nil {
			cmd.Stdout, cmd.Stderr = f, f
			defer func() { _ = f.Close() }()
		}
	}
	// Its own process group, so a stopped stand-in's daemon does not
	// outlive it through its children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting container %s: %w", c.Name, err)
	}
	p := &hostProcess{cmd: cmd, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	s.mu.Lock()
	s.hostProcs[key] = p
	s.mu.Unlock()

	if c.StartupProbe == nil || c.StartupProbe.Exec == nil {
		return nil
	}
	probe := s.resolve(c.StartupProbe.Exec.Command)
	deadline := time.Now().Add(time.Duration(max(c.StartupProbe.FailureThreshold, 1)*max(c.StartupProbe.PeriodSeconds, 1)) * time.Second)
	for {
		check := exec.CommandContext(ctx, probe[0], probe[1:]...)
		check.Env = cmd.Env
		if check.Run() == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("container %s exited during start-up: %v", c.Name, p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("startup probe failed: " + strings.Join(probe, " "))
		}
	}
}

// stopOnHost stops a pod's host process as the kubelet stops a container:
// SIGTERM, then SIGKILL after the grace period.
func (s *StandIn) stopOnHost(ctx context.Context, key string) {
	s.mu.Lock()
	p := s.hostProcs[key]
	delete(s.hostProcs, key)
	s.mu.Unlock()
	if p == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
	}
	klog.FromContext(ctx).V(2).Info("Host process of pod stopped", "pod", key, "err", p.err)
}
