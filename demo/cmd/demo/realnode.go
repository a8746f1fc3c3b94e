// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/nodebuild"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// Node kinds the demo can run.
const (
	nodeAuto    = "auto"
	nodeReal    = "real"
	nodeStandIn = "standin"
)

// chooseNodes decides between real nodes (kubelet, containerd, runc: root,
// Linux, writable cgroups, the node's binaries buildable) and kubelet
// stand-ins, and says why.
func chooseNodes(ctx context.Context, kind string) (realNodes bool, why string, err error) {
	if kind == nodeStandIn {
		return false, "asked for with -node=standin", nil
	}
	if err := harness.RealNodeSupport(); err != nil {
		if kind == nodeReal {
			return false, "", err
		}
		return false, err.Error(), nil
	}
	if _, err := nodebuild.Ensure(ctx, nodebuild.Options{Progress: os.Stdout}); err != nil {
		var unavailable *nodebuild.UnavailableError
		if kind == nodeAuto && errors.As(err, &unavailable) {
			return false, unavailable.Reason, nil
		}
		return false, "", err
	}
	return true, "root on Linux with writable cgroups", nil
}

// realNodePods rewrites the demo's pods for real nodes, which have no
// registry: every container runs the probe of the node's only image, which
// prints what it sees and waits. The result is written to dir.
func realNodePods(dir string, files ...string) (string, error) {
	var out bytes.Buffer
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		for doc, err := range yamldocs.All(data) {
			if err != nil {
				return "", fmt.Errorf("%s: %w", f, err)
			}
			if yamldocs.Blank(doc) {
				continue
			}
			var pod v1.Pod
			if err := yaml.UnmarshalStrict(doc, &pod); err != nil {
				return "", fmt.Errorf("%s: %w", f, err)
			}
			pod.Spec.AutomountServiceAccountToken = ptr.To(false)
			pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](5)
			for i := range pod.Spec.Containers {
				c := &pod.Spec.Containers[i]
				c.Image, c.ImagePullPolicy, c.Command, c.Args = harness.NodeImage, v1.PullNever, []string{"/probe"}, nil
			}
			raw, err := yaml.Marshal(&pod)
			if err != nil {
				return "", err
			}
			out.WriteString("---\n")
			out.Write(raw)
		}
	}
	path := filepath.Join(dir, "pods-on-real-nodes.yaml")
	return path, os.WriteFile(path, out.Bytes(), 0o644)
}

// realContainers prints, for each Running pod with claims, what its
// containers saw inside (the probe's report from the container log) and the
// limits the hook set on their cgroups.
func (r *reporter) realContainers(w io.Writer) {
	pods, err := r.client.CoreV1().Pods(r.namespace).List(r.ctx, metav1.ListOptions{})
	if err != nil {
		_, _ = fmt.Fprintln(w, "  listing pods:", err)
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		n := r.realNode(pod.Spec.NodeName)
		if n == nil || pod.Status.Phase != v1.PodRunning || len(pod.Spec.ResourceClaims) == 0 {
			continue
		}
		records, _ := n.LimitRecords()
		for _, cs := range pod.Status.ContainerStatuses {
			report, ok, err := n.Probe(pod, cs.Name)
			if err != nil || !ok {
				_, _ = fmt.Fprintf(w, "  %s/%s on %s: no report yet (%v)\n", pod.Name, cs.Name, n.Name, err)
				continue
			}
			_, _ = fmt.Fprintf(w, "  %s/%s on %s, as the container sees it:\n", pod.Name, cs.Name, n.Name)
			for _, k := range slices.Sorted(maps.Keys(report.Env)) {
				if strings.HasPrefix(k, "NVIDIA_") || strings.HasPrefix(k, "CUDA_") || strings.HasPrefix(k, "GPUFRAC_") {
					_, _ = fmt.Fprintf(w, "      env    %s=%s\n", k, report.Env[k])
				}
			}
			var devs []string
			for _, d := range slices.Sorted(maps.Keys(report.Devices)) {
				if strings.HasPrefix(d, "/dev/nvidia") {
					devs = append(devs, d+" ("+report.Devices[d]+")")
				}
			}
			_, _ = fmt.Fprintf(w, "      dev    %s\n", strings.Join(devs, " "))
			// The driver the claim's CDI spec gave it, as its own
			// /etc/ld.so.cache resolves it (no NVIDIA runtime on the node).
			for _, line := range report.DriverFiles() {
				_, _ = fmt.Fprintf(w, "      driver %s\n", line)
			}
			mps := report.Env["CUDA_MPS_PIPE_DIRECTORY"] != ""
			for _, m := range report.Mounts {
				if strings.Contains(m, "mps") {
					_, _ = fmt.Fprintf(w, "      mount  %s\n", m)
				}
			}
			// Its own tmpfs, no other tenant's (issue 33): the device
			// number tells file systems apart.
			if s := report.Shm; len(s) == 5 {
				_, _ = fmt.Fprintf(w, "      mount  /dev/shm: %s %q, device %s, %s,%s (a tmpfs of this container's own)\n", s[1], s[2], s[0], s[3], s[4])
			}
			if len(report.MPSPipe) > 0 {
				_, _ = fmt.Fprintf(w, "      pipe   %s\n", strings.Join(report.MPSPipe, " "))
			}
			switch {
			case !mps:
				_, _ = fmt.Fprintf(w, "      mps    not an MPS client\n")
			case slices.Contains(report.MPSPipe, "gpufrac"):
				_, _ = fmt.Fprintf(w, "      mps    client of the GPU's daemon through its main control socket: a per-UID server of its own, own context (TimeSlicing)\n")
			default:
				_, _ = fmt.Fprintf(w, "      mps    client of its own namespace on the GPU's shared-context server (SMSharing)\n")
			}
			id := strings.TrimPrefix(cs.ContainerID, "containerd://")
			for _, rec := range records {
				if id != "" && strings.HasSuffix(rec.Cgroup, id) {
					_, _ = fmt.Fprintf(w, "      hook   GPU %s: soft %s, hard %s on cgroup %s\n", rec.UUID, gib(int64(rec.Soft)), gib(int64(rec.Hard)), rec.Cgroup)
				}
			}
		}
	}
	for _, n := range r.realNodes {
		_, _ = fmt.Fprintf(w, "  (%s: pod logs under %s/pods; CDI specs %s; hook records %s)\n", n.Name, n.LogDir, n.CDIRoot, n.LimitRecord)
	}
	daemons, err := r.client.CoreV1().Pods(harness.MPSNamespace).List(r.ctx, metav1.ListOptions{})
	if err != nil || len(daemons.Items) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "  MPS control daemon Pods the plugins started, one per GPU that holds fractions (containerd runs gpufrac-mps-launcher from the plugin image, which chroots into the node's driver root and runs the MPS double there as usr/bin/nvidia-cuda-mps-control; the command lines below are in NVIDIA's documented grammar, which the double alone accepts):\n")
	for _, d := range daemons.Items {
		_, _ = fmt.Fprintf(w, "      %s/%s on %s for GPU %s: %s\n", d.Namespace, d.Name, d.Spec.NodeName, d.Labels["gpufrac.dev/gpu"], d.Status.Phase)
		daemonCommands(w, &d)
	}
}

func (r *reporter) realNode(name string) *harness.RealNode {
	for _, n := range r.realNodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func gib(bytes int64) string {
	return fmt.Sprintf("%.1fGi", float64(bytes)/(1<<30))
}
