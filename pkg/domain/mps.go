// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// MPSBinding is where a share's MPS control daemon lives on the host.
type MPSBinding struct {
	GPUUUID string `json:"gpuUUID"`
	PipeDir string `json:"pipeDir"`
	LogDir  string `json:"logDir"`
	ShmDir  string `json:"shmDir"`
	// Version is the daemon's protocol: MPSVersionV3, or empty
	// for legacy MPS (which checkpoints written before v3 support mean).
	Version string `json:"version,omitempty"`
	// Namespace is the claim's own MPS v3 namespace on the GPU's shared
	// server, which carries its pinned memory limit and thread percentage
	// daemon-side (SMSharing); empty on legacy MPS and for TimeSlicing
	// shares, which use the main socket (see ClientPipeDir).
	Namespace string `json:"namespace,omitempty"`
}

// Route says in words where the share's container reaches MPS, for the
// claim's status and the demo.
func (b MPSBinding) Route() string {
	switch {
	case b.Version != MPSVersionV3:
		return "legacy MPS server (pinned device memory limit)"
	case b.Namespace == "":
		return "MPS v3 main socket: a per-UID server, own context (TimeSlicing)"
	default:
		return "MPS v3 namespace " + b.Namespace + " of server " + MPSServerName + ", shared context (SMSharing)"
	}
}

// MPSServerName is the one named MPS v3 server per GPU that SMSharing
// clients share (NVIDIA, mpsv3-configuration-file: lowercase letters,
// digits and '_', at most 64 characters).
const MPSServerName = "gpufrac"

// MPSNamespaceFor names a claim's MPS v3 namespace after its UID, in the
// characters MPS allows (lowercase letters, digits, '_'), and short: the
// namespace's socket, <mps root>/<gpu>/pipe/gpufrac/<namespace>/control,
// must stay under the 108 bytes of a unix socket path.
func MPSNamespaceFor(uid types.UID) string { return "c" + shortHash(string(uid), 16) }

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
func (b MPSBinding) ClientPipeDir() string {
	if b.Version == MPSVersionV3 && b.Namespace != "" {
		return filepath.Join(b.PipeDir, MPSServerName, b.Namespace)
	}
	return b.PipeDir
}

// MPSBindingFor is the per-GPU directory layout under root, shared by the
// plan and the daemon manager so they cannot disagree.
func MPSBindingFor(root, gpuUUID string) *MPSBinding {
	// A short name rather than the 40-character UUID keeps the daemon's
	// sockets under the unix path limit (see MPSNamespaceFor).
	dir := filepath.Join(root, "g"+shortHash(gpuUUID, 12))
	return &MPSBinding{
		GPUUUID: gpuUUID,
		PipeDir: filepath.Join(dir, "pipe"),
		LogDir:  filepath.Join(dir, "log"),
		ShmDir:  filepath.Join(dir, "shm"),
	}
}
