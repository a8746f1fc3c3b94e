// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/featureprobe"
)

// TestRefusesToStartWithoutConsumableCapacity: on an API server with
// DRAConsumableCapacity off, which accepts the plugin's slices and the
// controller's templates without their capacity fields (silently), both
// binaries refuse to start, naming the server's version and the gate. The
// shared control plane (default gates) lets the same probes pass.
func TestRefusesToStartWithoutConsumableCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	// The same probes pass on the shared control plane: what they write is
	// what a default server of this release keeps.
	if err := featureprobe.Plugin(ctx, cp.Client, "probe-node"); err != nil {
		t.Errorf("the plugin's probe on the default control plane %s: %v", cp.KubeVersion, err)
	}
	if err := featureprobe.Controller(ctx, cp.Client, "default"); err != nil {
		t.Errorf("the controller's probe on the default control plane %s: %v", cp.KubeVersion, err)
	}

	controllerBin := buildController(ctx, t)
	off, err := harness.Start(ctx, harness.Options{
		Progress:      os.Stderr,
		PluginBinary:  cp.PluginBinary,
		APIServerArgs: []string{"--feature-gates=DRAConsumableCapacity=false"},
	})
	if err != nil {
		t.Fatalf("starting a control plane with DRAConsumableCapacity=false: %v", err)
	}
	t.Cleanup(func() { _ = off.Close() })
	const ns = "gpufrac-system"
	if _, err := off.Client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}

	dir := t.TempDir()
	plugin := refusal(ctx, t, off.PluginBinary,
		"--node-name=gated1", "--simulate-gpus=h200x1", "--kubeconfig="+off.Kubeconfig,
		"--plugin-data-dir="+filepath.Join(dir, "plugin"), "--registrar-dir="+filepath.Join(dir, "registry"),
		"--cdi-root="+filepath.Join(dir, "cdi"), "--metrics-address=")
	controller := refusal(ctx, t, controllerBin,
		"--kubeconfig="+off.Kubeconfig, "--namespace="+ns,
		"--webhook-address=127.0.0.1:0", "--metrics-address=")
	for name, out := range map[string]string{"gpufrac-kubelet-plugin": plugin, "gpufrac-controller": controller} {
		t.Logf("%s refused to start:\n%s", name, tail([]byte(out), 2))
		for _, want := range []string{"the Kubernetes API server " + off.KubeVersion, "DRAConsumableCapacity", "Kubernetes 1.36 or later"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s's refusal does not say %q:\n%s", name, want, out)
			}
		}
		// Only the gate that is off is named.
		if strings.Contains(out, "DRADeviceTaints (") {
			t.Errorf("%s's refusal names DRADeviceTaints, which is on:\n%s", name, out)
		}
	}
	// Nothing was stored: the probe is a dry run, and the plugin stopped
	// before publishing.
	slices, err := off.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil || len(slices.Items) != 0 {
		t.Errorf("ResourceSlices after the refusals: %d (%v), want none", len(slices.Items), err)
	}
	templates, err := off.Client.ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(templates.Items) != 0 {
		t.Errorf("ResourceClaimTemplates after the refusals: %d (%v), want none", len(templates.Items), err)
	}
}

// refusal runs a binary that must exit by itself with an error, and
// returns its output.
func refusal(ctx context.Context, t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%s still ran after %s, want a refusal at start:\n%s", filepath.Base(bin), waitTimeout, out.String())
	}
	if err == nil {
		t.Fatalf("%s exited 0, want a refusal:\n%s", filepath.Base(bin), out.String())
	}
	return out.String()
}

// buildController builds gpufrac-controller from the checkout (the harness
// runs its logic in-process; this test needs its main).
func buildController(ctx context.Context, t *testing.T) string {
	t.Helper()
	root, err := kubebuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", dir+"/", "./cmd/gpufrac-controller")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building gpufrac-controller: %v\n%s", err, out)
	}
	return filepath.Join(dir, "gpufrac-controller")
}
