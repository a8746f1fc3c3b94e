// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
)

// Helm runs the Helm SDK's actions (what `helm install/upgrade/rollback/
// uninstall --wait` run) against the control plane as its admin, through
// test/helm/internal/helmrun: the SDK lives in the test/helm module, so
// that it never becomes a dependency of gpufrac, and runs in a process of
// its own (see helmrun for why).
type Helm struct {
	bin, dir   string
	kubeconfig string
	chart      string
	// Namespace of the releases.
	Namespace string
	// Timeout bounds each action's wait for the release's pods.
	Timeout time.Duration
	// NoWait returns as soon as the objects are applied (a control plane
	// without nodes never runs the release's pods).
	NoWait bool
}

// FromPackage makes install and upgrade take the chart from a packaged
// chart (a .tgz, as `make release` builds it) instead of the checkout's
// directory.
func (h *Helm) FromPackage(pkg string) { h.chart = pkg }

// HelmRelease is what an action reports.
type HelmRelease struct {
	Name        string `json:"name"`
	Revision    int    `json:"revision"`
	Status      string `json:"status"`
	Description string `json:"description"`
}

// NewHelm builds helmrun into the control plane's directory; releases go to
// namespace, from the chart deployments/helm/gpufrac of this checkout.
func (cp *ControlPlane) NewHelm(ctx context.Context, namespace string) (*Helm, error) {
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cp.Dir, "helm")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "helmrun")
	if err := cp.progress.Run(ctx, "Building test/helm/internal/helmrun (the Helm SDK)", filepath.Join(root, "test", "helm"), nil,
		"go", "build", "-o", bin, "./internal/helmrun"); err != nil {
		return nil, err
	}
	return &Helm{bin: bin, dir: dir, kubeconfig: cp.Kubeconfig, chart: filepath.Join(root, "deployments", "helm", "gpufrac"),
		Namespace: namespace, Timeout: 4 * time.Minute}, nil
}

func (h *Helm) run(ctx context.Context, action, name string, values map[string]any, extra ...string) (*HelmRelease, error) {
	args := []string{"-kubeconfig", h.kubeconfig, "-namespace", h.Namespace, "-release", name, "-action", action,
		"-timeout", h.Timeout.String(), "-wait=" + strconv.FormatBool(!h.NoWait)}
	if values != nil {
		raw, err := json.Marshal(values)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(h.dir, name+"-"+action+"-values.json")
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			return nil, err
		}
		args = append(args, "-chart", h.chart, "-values", file)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("helm %s %s: %v: %s", action, name, err, bytes.TrimSpace(stderr.Bytes()))
	}
	var rel HelmRelease
	if err := json.Unmarshal(stdout.Bytes(), &rel); err != nil {
		return nil, fmt.Errorf("helmrun printed %q: %w", stdout.String(), err)
	}
	return &rel, nil
}

// Install installs the chart as release name with values.
func (h *Helm) Install(ctx context.Context, name string, values map[string]any) (*HelmRelease, error) {
	return h.run(ctx, "install", name, values)
}

// Upgrade upgrades release name to the chart with values.
func (h *Helm) Upgrade(ctx context.Context, name string, values map[string]any) (*HelmRelease, error) {
	return h.run(ctx, "upgrade", name, values)
}

// Rollback rolls release name back to revision.
func (h *Helm) Rollback(ctx context.Context, name string, revision int) (*HelmRelease, error) {
	return h.run(ctx, "rollback", name, nil, "-revision", strconv.Itoa(revision))
}

// Uninstall uninstalls release name and waits until its objects are gone.
func (h *Helm) Uninstall(ctx context.Context, name string) error {
	_, err := h.run(ctx, "uninstall", name, nil)
	return err
}

// ChartValues are the chart's values for a real node added with
// ChartPlugin, running the image ChartImageRepository:tag (imported into
// the node, never pulled): the node's CDI spec directory, simulated GPUs,
// MPS on (the daemons run the chart's own image, whose gpufrac-mps-launcher
// chroots into the node's driver root, where AddRealNode put the MPS
// double), and where pods
// reach the API server.
func (cp *ControlPlane) ChartValues(n *RealNode, gpus, tag string) (map[string]any, error) {
	host, port, err := cp.APIServerForPods()
	if err != nil {
		return nil, err
	}
	return map[string]any{
		"image": map[string]any{"tag": tag, "pullPolicy": "Never"},
		"kubeletPlugin": map[string]any{
			// containerd's cdi_spec_dirs on this node.
			"cdiRoot":   n.CDIRoot,
			"extraArgs": []any{"--simulate-gpus=" + gpus},
		},
		"mps":           map[string]any{"enabled": true},
		"kubernetesAPI": map[string]any{"host": host, "port": strconv.Itoa(port)},
	}, nil
}
