// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// A client of the node server keeps its server's GPU list across a
// restart, so the restarted plugin counts it as a user of the node server
// and not of its GPU's own daemon; an entry without the list (every
// earlier release's) still reads as a per-GPU daemon's client; and the
// first tolerant release quarantines a node-server entry instead of
// releasing the wrong daemon at Unprepare.
func TestNodeServerBindingSurvivesRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	path := filepath.Join(t.TempDir(), "checkpoint.json")
	c, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	node := entry("node", checkpoint.Completed)
	b := mpslayout.ForNodeServer("/run/mps", "GPU-0", []string{"GPU-1", "GPU-0"})
	b.Version = domain.MPSVersionV3
	node.Plan.Devices[0].MPS = b
	perGPU := entry("gpu", checkpoint.Completed)
	pb := mpslayout.For("/run/mps", "GPU-0")
	pb.Version = domain.MPSVersionV3
	perGPU.Plan.Devices[0].MPS = pb
	for _, e := range []checkpoint.Entry{node, perGPU} {
		if err := c.Put(e); err != nil {
			t.Fatal(err)
		}
	}
	again, err := checkpoint.Open(ctx, path, "boot-1")
	if err != nil {
		t.Fatal(err)
	}
	got, ok := again.Get("node")
	if !ok {
		t.Fatal("the node server's client was not read back")
	}
	mps := got.Plan.Devices[0].MPS
	if mps == nil || mps.DaemonKey() != mpslayout.NodeServerKey || !slices.Equal(mps.ServerGPUs, []string{"GPU-0", "GPU-1"}) || mps.Version != domain.MPSVersionV3 || mps.PipeDir != b.PipeDir {
		t.Errorf("read back %+v, want %+v", mps, b)
	}
	if g, ok := again.Get("gpu"); !ok || g.Plan.Devices[0].MPS.DaemonKey() != "GPU-0" || g.Plan.Devices[0].MPS.ServerGPUs != nil {
		t.Errorf("a per-GPU client read back as %+v", g.Plan.Devices[0].MPS)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(raw), `"serverGPUs"`) != 1 {
		t.Errorf("serverGPUs written %d times, want once (omitted for the per-GPU client): %s", strings.Count(string(raw), `"serverGPUs"`), raw)
	}
	claims, quarantined, err := frozenV1Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := quarantined["node"]; !ok {
		t.Errorf("the first tolerant release did not quarantine the node server's client (claims %v)", claims)
	}
	if _, ok := claims["gpu"]; !ok {
		t.Errorf("the first tolerant release lost the per-GPU client")
	}
}

// An entry whose list and version disagree is not understood: quarantined.
func TestNodeServerBindingMustAgreeWithItsVersion(t *testing.T) {
	for name, mps := range map[string]string{
		"list without the node server's version": `{"gpuUUID":"GPU-0","pipeDir":"/p","logDir":"/l","shmDir":"/s","version":"v3","serverGPUs":["GPU-0"]}`,
		"node server's version without a list":   `{"gpuUUID":"GPU-0","pipeDir":"/p","logDir":"/l","shmDir":"/s","version":"v3-node-server"}`,
	} {
		t.Run(name, func(t *testing.T) {
			data := `{"bootID":"b","claims":{"u":{"state":"Completed","plan":{"uid":"u","namespace":"ns","name":"c","devices":[` +
				`{"request":"gpu","pool":"n","device":"gpu-0","gpu":{"UUID":"GPU-0"},"softLimitBytes":1,"hardLimitBytes":1,"computeMode":"TimeSlicing","enforcement":"dmem","mps":` + mps + `}]}}}}`
			sum := sha256.Sum256([]byte(data))
			raw := `{"version":1,"checksum":"sha256:` + hex.EncodeToString(sum[:]) + `","data":` + data + `}`
			d, err := checkpoint.Decode([]byte(raw))
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := d.Quarantined["u"]; !ok {
				t.Errorf("not quarantined: %+v", d.Claims)
			}
		})
	}
}
