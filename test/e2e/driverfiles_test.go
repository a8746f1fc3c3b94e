// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// TestCDISpecNeedsNoNvidiaRuntime: the real node runs containerd, runc
// and CDI and no NVIDIA runtime. With a (stub) driver under its driver
// root, in the host's layout and in the GPU Operator's, a fraction
// container gets the driver from its claim's CDI spec alone:
// libcuda.so.1 and libnvidia-ml.so.1 resolve through its own
// /etc/ld.so.cache to the driver root's files, nvidia-smi is the driver
// root's, it sees /dev/nvidia<minor> of its claim's GPU only, and it ends
// with one NVIDIA_VISIBLE_DEVICES, the claim's, though its pod set
// another (as a CUDA image does).
func TestCDISpecNeedsNoNvidiaRuntime(t *testing.T) {
	t.Run("host", func(t *testing.T) {
		e := newEnv(t)
		root := filepath.Join(node.PluginDataDir, "simulated-driver-root")
		e.withStubDriver(root)
		e.checkDriverFiles(e.classFor(2), root)
	})
	t.Run("gpu-operator", func(t *testing.T) {
		e := newEnv(t)
		root := filepath.Join(filepath.Dir(node.PluginDataDir), "gpu-operator", "run", "nvidia", "driver")
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		// As in TestGPUOperatorNode: the host's (simulated) driver root
		// goes, the operator's root holds the driver and MPS.
		if err := os.RemoveAll(filepath.Join(node.PluginDataDir, "simulated-driver-root")); err != nil {
			t.Fatal(err)
		}
		if err := cp.InstallMPSDouble(e.ctx, root); err != nil {
			t.Fatal(err)
		}
		e.withStubDriver(root, "--driver-root="+root)
		t.Cleanup(func() {
			if err := node.InstallMPSDouble(e.ctx, filepath.Join(node.PluginDataDir, "simulated-driver-root")); err != nil {
				t.Error(err)
			}
		})
		e.checkDriverFiles(e.classFor(3), root)
	})
}

// withStubDriver installs the stub driver under root and restarts the
// plugin (with extra flags), which finds it there; cleanup removes it
// before the plugin is restored, so other tests' specs carry no driver.
func (e *env) withStubDriver(root string, extra ...string) {
	e.t.Helper()
	added, err := node.InstallStubDriver(e.ctx, root)
	if err != nil {
		e.t.Fatal(err)
	}
	e.asNodeKind(extra...)
	// Registered after asNodeKind's: runs before its restart.
	e.t.Cleanup(func() {
		if err := node.RemoveFiles(added); err != nil {
			e.t.Errorf("removing the stub driver: %v", err)
		}
	})
}

func (e *env) checkDriverFiles(class, root string) {
	e.t.Helper()
	e.createTemplate("cuda", class, "20Gi", "memoryLimit: 30Gi\n")
	pod := probePod("cuda", "cuda")
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}
	e.createPod(pod)
	running := e.waitRunning("cuda")
	g := e.gpuOf(running)
	s := e.probe(running)
	e.checkSees(s, g, 20, 30)
	for _, line := range s.DriverFiles() {
		e.t.Logf("the container's driver: %s", line)
	}
	for _, p := range harness.DriverFilesProblems(s, []int64{g.Minor}) {
		e.t.Errorf("the container cannot run CUDA without an NVIDIA runtime: %s", p)
	}
	// Its files are the driver root's, named by host path in the spec.
	spec := readSpec(e.t, specPath(g.Claim))
	var hosts []string
	for _, m := range spec.ContainerEdits.Mounts {
		hosts = append(hosts, m.HostPath)
	}
	for _, f := range harness.StubDriverFiles {
		if !slices.Contains(hosts, filepath.Join(root, f)) {
			e.t.Errorf("the CDI spec does not mount %s: %v", filepath.Join(root, f), hosts)
		}
	}
	var ldcache bool
	for _, h := range specHooks(spec) {
		ldcache = ldcache || (h.HookName == "createContainer" && slices.Contains(h.Args, "ldcache"))
	}
	if !ldcache {
		e.t.Errorf("the CDI spec has no ldcache hook: %+v", specHooks(spec))
	}
}
