// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// TestPluginFilesAreNotWorldReadable checks docs/security.md's promise: the
// directories the plugin creates (data with the DRA socket and checkpoint,
// registrar) let no other user in, and the checkpoint, which lists every
// claim on the node with its limits, is readable by its owner alone.
func TestPluginFilesAreNotWorldReadable(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	srv, err := gpusim.New("h200x1", nodeName)
	if err != nil {
		t.Fatal(err)
	}
	root := shortTempDir(t)
	cfg := nodeplugin.Config{
		NodeName: nodeName, KubeClient: client, NVML: srv,
		InventoryOptions: nvmldiscovery.Options{ForceEnforcement: domain.EnforcementDMem},
		// Not existing yet: the plugin creates them, as on a fresh node.
		PluginDataDir: filepath.Join(root, "var", "plugin"),
		RegistrarDir:  filepath.Join(root, "var", "registry"),
		CDIRoot:       filepath.Join(root, "cdi"),
		CDI:           cdispec.Options{HookPath: "/opt/gpufrac/gpufrac-cdi-hook", DeviceNode: gpusim.DeviceNode},
		BootID:        "boot-1",
		Health:        nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
	}
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()

	// A prepared claim, so that the checkpoint exists.
	claim := allocatedClaim()
	if _, err := client.ResourceV1().ResourceClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dra := drapb.NewDRAPluginClient(dial(t, filepath.Join(cfg.PluginDataDir, "dra.sock")))
	prep, err := dra.NodePrepareResources(context.WithoutCancel(ctx), &drapb.NodePrepareResourcesRequest{
		Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}},
	})
	if err != nil || prep.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("NodePrepareResources: %v %+v", err, prep)
	}

	for path, forbidden := range map[string]fs.FileMode{
		// No write for the group, nothing for others: the DRA and
		// registration sockets inside are out of other users' reach
		// whatever their own mode.
		cfg.PluginDataDir: 0o027,
		cfg.RegistrarDir:  0o027,
		filepath.Join(cfg.PluginDataDir, nodeplugin.CheckpointFile): 0o077,
	} {
		st, err := os.Stat(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if perm := st.Mode().Perm(); perm&forbidden != 0 {
			t.Errorf("%s has mode %v; the bits %v must be clear", path, perm, forbidden)
		}
	}
}
