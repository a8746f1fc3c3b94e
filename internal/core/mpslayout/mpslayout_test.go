// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mpslayout_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// The layout is pinned here: its sockets must stay under the
// 108-byte unix path limit below the default plugin data directory.
func TestFitsSocketPaths(t *testing.T) {
	b := mpslayout.For("/var/lib/kubelet/plugins/gpufrac.dev/mps", "GPU-74d43ed3-cdf7-e667-3644-bf5b4f46ed65")
	b.Version, b.Namespace = domain.MPSVersionV3, mpslayout.NamespaceFor("0d2e8a9c-5b1f-4c8e-9a57-3f2b6c1d7e90")
	if !strings.HasPrefix(b.ClientPipeDir(), b.PipeDir+"/gpufrac/") {
		t.Errorf("client pipe dir %s is not under the server's %s", b.ClientPipeDir(), b.PipeDir+"/gpufrac")
	}
	if sock := b.ClientPipeDir() + "/control"; len(sock) >= 108 {
		t.Errorf("namespace socket %s is %d bytes, over the unix limit", sock, len(sock))
	}
	if ns := b.Namespace; len(ns) > 64 || strings.Trim(ns, "abcdefghijklmnopqrstuvwxyz0123456789_") != "" {
		t.Errorf("namespace %q breaks MPS's naming rule", ns)
	}
	// The node server's directory is the node's, not a GPU's: shares of
	// two GPUs reach one daemon, and its sockets fit too.
	n0 := mpslayout.ForNodeServer("/var/lib/kubelet/plugins/gpufrac.dev/mps", "GPU-0", []string{"GPU-1", "GPU-0"})
	n1 := mpslayout.ForNodeServer("/var/lib/kubelet/plugins/gpufrac.dev/mps", "GPU-1", []string{"GPU-0", "GPU-1"})
	n0.Version, n0.Namespace = domain.MPSVersionV3, b.Namespace
	if n0.PipeDir != n1.PipeDir || n0.DaemonKey() != n1.DaemonKey() || n0.DaemonKey() == b.DaemonKey() {
		t.Errorf("node server bindings of two GPUs reach different daemons (%s %s, %s %s), or the same as a per-GPU one", n0.PipeDir, n0.DaemonKey(), n1.PipeDir, n1.DaemonKey())
	}
	if sock := n0.ClientPipeDir() + "/control"; len(sock) >= 108 {
		t.Errorf("node server namespace socket %s is %d bytes, over the unix limit", sock, len(sock))
	}
}

// TestBindingJSON: a Binding's field names on the wire are the ones the
// package had under pkg/domain (domain.MPSBinding); moving or renaming the
// Go type must not rename them.
func TestBindingJSON(t *testing.T) {
	b := mpslayout.ForNodeServer("/mps", "GPU-1", []string{"GPU-1", "GPU-0"})
	b.Version, b.Namespace = domain.MPSVersionV3, "cabc"
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"gpuUUID":"GPU-1","pipeDir":"/mps/node/pipe","logDir":"/mps/node/log","shmDir":"/mps/node/shm","version":"v3","namespace":"cabc","serverGPUs":["GPU-0","GPU-1"]}`
	if string(out) != want {
		t.Errorf("Binding JSON = %s\nwant %s", out, want)
	}
	var back mpslayout.Binding
	if err := json.Unmarshal([]byte(want), &back); err != nil || back.ClientPipeDir() != "/mps/node/pipe/gpufrac/cabc" || back.DaemonKey() != mpslayout.NodeServerKey {
		t.Errorf("decoded %+v (%v): pipe %s, key %s", back, err, back.ClientPipeDir(), back.DaemonKey())
	}
}

// TestRoute: the words the claim's status and the demo show for each kind
// of binding.
func TestRoute(t *testing.T) {
	legacy := mpslayout.For("/mps", "GPU-0")
	ts := *legacy
	ts.Version = domain.MPSVersionV3
	sm := ts
	sm.Namespace = "cabc"
	node := *mpslayout.ForNodeServer("/mps", "GPU-0", []string{"GPU-0", "GPU-1"})
	node.Version, node.Namespace = domain.MPSVersionV3, "cabc"
	for _, tc := range []struct {
		b    mpslayout.Binding
		want string
	}{
		{*legacy, "legacy MPS server (pinned device memory limit)"},
		{ts, "MPS v3 main socket: a per-UID server, own context (TimeSlicing)"},
		{sm, "MPS v3 namespace cabc of server gpufrac, shared context (SMSharing)"},
		{node, "MPS v3 namespace cabc of server gpufrac (the node server over 2 GPUs), shared context (SMSharing)"},
	} {
		if got := tc.b.Route(); got != tc.want {
			t.Errorf("Route() = %q, want %q", got, tc.want)
		}
	}
}
