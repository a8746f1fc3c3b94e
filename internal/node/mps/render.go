// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mps runs the managed MPS servers: one MPS control daemon per GPU,
// as a Pod rendered from templates/mps-control-daemon.yaml (templates.MPSControlDaemon) and pinned to
// this node, started when the GPU gets its first claim that uses MPS
// (SMSharing claims; on MPS v3 nodes with per-cgroup limits every claim,
// so that MPS eviction upholds each request), awaited until ready before
// Prepare returns, recreated if it dies, and deleted after the last such
// claim goes. Reference counts are rebuilt from the checkpoint after a
// restart.
//
// One daemon per GPU by default rather than one per node (NVIDIA allows
// either): a daemon's restart, or a wedged server, touches one GPU's
// tenants, and a daemon runs only for GPUs that hold fractions. The price:
// a container reaches one daemon, so a claim whose shares are MPS clients
// spans one GPU (internal/core/plan refuses others with the reason). MPS
// v3 nodes may run the node server instead (mpslayout.ForNodeServer): one
// daemon whose server lists every fraction GPU of the node, so a claim of
// several GPUs is one client of it. Daemons, their users, locks, Pods and
// readiness are keyed by mpslayout.Binding.DaemonKey; the memory ledger,
// limits and incidents stay per GPU.
//
// A Pod, not a Deployment: the plugin owns the daemon's whole lifecycle
// (reference counts, garbage collection, recreation); a Deployment's
// controller would recreate daemons the plugin just removed and would need
// apps/* permissions the plugin otherwise does without.
package mps

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"text/template"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
)

// Labels of daemon Pods; the node and GPU labels let a restarted plugin find
// and garbage-collect its own daemons.
const (
	LabelComponent = "app.kubernetes.io/component"
	ComponentValue = "gpufrac-mps-control-daemon"
	LabelNode      = "gpufrac.dev/node"
	LabelGPU       = "gpufrac.dev/gpu"
)

// DaemonParams fill the template.
type DaemonParams struct {
	Name      string
	Namespace string
	NodeName  string
	// GPUUUID is the daemon's GPU, or for the node server the
	// comma-separated list of the GPUs it serves (CUDA_VISIBLE_DEVICES's
	// form).
	GPUUUID string
	// DaemonKey is mpslayout.Binding.DaemonKey: the GPU's UUID for a
	// per-GPU daemon, mpslayout.NodeServerKey for the node server; the Pod's
	// LabelGPU carries it.
	DaemonKey string
	// GPUs are the GPUs the daemon serves, one for a per-GPU daemon; each
	// gets its compute-mode init container.
	GPUs     []string
	GPUIndex int
	// Image is the plugin's own image: the daemon runs the node's MPS
	// binaries through its gpufrac-mps-launcher, never an image of its own.
	Image string
	// DriverRoot is the host path of the node's NVIDIA driver root, where
	// nvidia-cuda-mps-control, nvidia-smi and their loader live.
	DriverRoot string
	// Version is the node's MPS version: "v3" or "legacy".
	Version string
	// Host directories of this GPU's daemon.
	PipeDir, LogDir, ShmDir, ConfigDir string
	// ServerName is the MPS v3 server SMSharing clients share.
	ServerName string
	// GPUMemoryMiB is the GPU's memory: informational for a real daemon,
	// the memory ledger's size for the MPS double.
	GPUMemoryMiB int64
	// GPUsMemoryMiB is every served GPU's memory, "<uuid>=<MiB>,...":
	// informational for a real daemon, the MPS double's ledger of a node
	// server's GPUs.
	GPUsMemoryMiB string
	// SafetyMemoryMiB and SafetyThreadPercentage bind the shared MPS v3
	// server's default namespace, where a misrouted SMSharing client
	// would land (Config.DefaultNamespaceLimits).
	SafetyMemoryMiB        int64
	SafetyThreadPercentage int
}

// ConfigDir is where the plugin writes a GPU daemon's settings.
func ConfigDir(b mpslayout.Binding) string { return filepath.Join(filepath.Dir(b.PipeDir), "config") }

// PodName names a daemon: stable for the node and the daemon's key (a
// GPU's UUID, or mpslayout.NodeServerKey), short enough for any node name.
func PodName(nodeName, daemonKey string) string {
	sum := sha256.Sum256([]byte(nodeName + "/" + daemonKey))
	return "gpufrac-mps-" + hex.EncodeToString(sum[:])[:16]
}

// Render turns the template text into the daemon Pod.
func Render(text string, p DaemonParams) (*corev1.Pod, error) {
	// Callers of a per-GPU daemon may name only its GPU.
	if p.DaemonKey == "" {
		p.DaemonKey = p.GPUUUID
	}
	if len(p.GPUs) == 0 {
		p.GPUs = []string{p.GPUUUID}
	}
	if p.GPUsMemoryMiB == "" {
		p.GPUsMemoryMiB = fmt.Sprintf("%s=%d", p.GPUUUID, p.GPUMemoryMiB)
	}
	tmpl, err := template.New("mps-control-daemon").Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parsing the MPS daemon template: %w", err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, p); err != nil {
		return nil, fmt.Errorf("rendering the MPS daemon template: %w", err)
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(buf.Bytes(), &pod); err != nil {
		return nil, fmt.Errorf("the rendered MPS daemon template is not a valid Pod: %w", err)
	}
	if pod.Name != p.Name || pod.Namespace != p.Namespace || pod.Spec.NodeName != p.NodeName {
		return nil, fmt.Errorf("the MPS daemon template must keep name {{.Name}}, namespace {{.Namespace}} and nodeName {{.NodeName}}")
	}
	if pod.Labels[LabelComponent] != ComponentValue || pod.Labels[LabelNode] != p.NodeName || pod.Labels[LabelGPU] != p.DaemonKey {
		return nil, fmt.Errorf("the MPS daemon template must keep the labels %s, %s and %s ({{.DaemonKey}}: %q)", LabelComponent, LabelNode, LabelGPU, p.DaemonKey)
	}
	return &pod, nil
}
