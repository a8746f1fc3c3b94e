// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mpslayout is where a share's MPS control daemon lives on the
// host: the Binding the plan gives a share and the checkpoint stores, and
// the directory layout under the plugin's MPS root (per-GPU daemons, the
// node server, an SMSharing claim's namespace). The plan (internal/core)
// and the node's daemon manager both derive paths from here, so they cannot
// disagree; it sits in the core, not in internal/node, because the pure
// plan must not import the node (test/deps). No other program needs these
// paths, so it is not in pkg/.
package mpslayout

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Binding is where a share's MPS control daemon lives on the host.
type Binding struct {
	GPUUUID string `json:"gpuUUID"`
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	ShmDir  string `json:"shmDir"`
	// Version is the daemon's protocol: domain.MPSVersionV3, or empty
	// for legacy MPS (which checkpoints written before v3 support mean).
	Version string `json:"version,omitempty"`
	// Namespace is the claim's own MPS v3 namespace on the GPU's shared
	// server, which carries its pinned memory limit and thread percentage
	// daemon-side (SMSharing); empty on legacy MPS and for TimeSlicing
	// shares, which use the main socket (see ClientPipeDir).
	Namespace string `json:"namespace,omitempty"`
	// ServerGPUs lists, sorted, every GPU of a node server: the one MPS v3
	// daemon whose server serves all the node's fraction GPUs (its
	// allowed_devices), so that every client of a GPU is a client of one
	// server, whichever GPUs its claim spans (eviction is per server,
	// docs/design/nvidia/mps-multi-gpu.md M4). Empty for the per-GPU daemon of
	// GPUUUID. GPUUUID stays the share's own GPU either way: the memory
	// ledger, incidents and metrics are per GPU.
	ServerGPUs []string `json:"serverGPUs,omitempty"`
}

// NodeServerKey is DaemonKey of a node server's bindings.
const NodeServerKey = "node"

// DaemonKey names the daemon a binding reaches: its GPU's for a per-GPU
// daemon, NodeServerKey for the node server. Two shares reach one MPS
// server exactly when their keys are equal.
func (b Binding) DaemonKey() string {
	if len(b.ServerGPUs) > 0 {
		return NodeServerKey
	}
	return b.GPUUUID
}

// Route says in words where the share's container reaches MPS, for the
// claim's status and the demo.
func (b Binding) Route() string {
	switch {
	case b.Version != domain.MPSVersionV3:
		return "legacy MPS server (pinned device memory limit)"
	case b.Namespace == "":
		return "MPS v3 main socket" + b.nodeServer() + ": a per-UID server, own context (TimeSlicing)"
	default:
		return "MPS v3 namespace " + b.Namespace + " of server " + ServerName + b.nodeServer() + ", shared context (SMSharing)"
	}
}

// nodeServer says, for Route, that the server is the node's.
func (b Binding) nodeServer() string {
	if len(b.ServerGPUs) == 0 {
		return ""
	}
	return fmt.Sprintf(" (the node server over %d GPUs)", len(b.ServerGPUs))
}

// ServerName is the one named MPS v3 server per GPU that SMSharing
// clients share (NVIDIA, mpsv3-configuration-file: lowercase letters,
// digits and '_', at most 64 characters).
const ServerName = "gpufrac"

// NamespaceFor names a claim's MPS v3 namespace after its UID, in the
// characters MPS allows (lowercase letters, digits, '_'), and short: the
// namespace's socket, <mps root>/<gpu>/pipe/gpufrac/<namespace>/control,
// must stay under the 108 bytes of a unix socket path.
func NamespaceFor(uid types.UID) string { return "c" + shortHash(string(uid), 16) }

func shortHash(s string, n int) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:n]
}

// ClientPipeDir is the host directory a client's CUDA_MPS_PIPE_DIRECTORY
// must show. Legacy MPS has one per daemon. MPS v3 routes a client by the
// socket it connects to (NVIDIA, mpsv3-namespaces, "Namespace Routing"):
// an SMSharing share gets <pipe>/<server>/<namespace> alone, so it cannot
// reach another claim's namespace or the shared server's default one; a
// TimeSlicing share gets the daemon's pipe directory, whose main control
// socket routes it by UID to a server of its own, outside context sharing
// (default_socket off), as NVIDIA's KAI operator routes time-slicing
// containers.
func (b Binding) ClientPipeDir() string {
	if b.Version == domain.MPSVersionV3 && b.Namespace != "" {
		return filepath.Join(b.PipeDir, ServerName, b.Namespace)
	}
	return b.PipeDir
}

// For is the per-GPU directory layout under root, shared by the
// plan and the daemon manager so they cannot disagree.
func For(root, gpuUUID string) *Binding {
	// A short name rather than the 40-character UUID keeps the daemon's
	// sockets under the unix path limit (see NamespaceFor).
	dir := filepath.Join(root, "g"+shortHash(gpuUUID, 12))
	return &Binding{
		GPUUUID: gpuUUID,
		PipeDir: filepath.Join(dir, "pipe"),
		LogDir:  filepath.Join(dir, "log"),
		ShmDir:  filepath.Join(dir, "shm"),
	}
}

// ForNodeServer is the node server's layout under root, for a share of
// gpuUUID, one of serverGPUs (the node's fraction GPUs). One directory for
// the node, shorter than a GPU's, so the namespace sockets stay under the
// unix path limit too.
func ForNodeServer(root, gpuUUID string, serverGPUs []string) *Binding {
	dir := filepath.Join(root, NodeServerKey)
	gpus := slices.Clone(serverGPUs)
	slices.Sort(gpus)
	return &Binding{
		GPUUUID:    gpuUUID,
		PipeDir:    filepath.Join(dir, "pipe"),
		LogDir:     filepath.Join(dir, "log"),
		ShmDir:     filepath.Join(dir, "shm"),
		ServerGPUs: gpus,
	}
}
