// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Paths inside the real node's mount namespace (tmpfs there).
const (
	containerdSocket = "/run/containerd/containerd.sock"
	kubeletRootDir   = "/var/lib/kubelet"
	kubeletRegistry  = kubeletRootDir + "/plugins_registry"
)

// nodeQuirks are what this machine needs that a normal node does not; each
// is detected, never assumed.
type nodeQuirks struct {
	// cgroupV1: the kubelet refuses cgroup v1 unless told otherwise.
	cgroupV1 bool
	// noSysResource: without CAP_SYS_RESOURCE containerd cannot lower a
	// container's oom_score_adj below its own.
	noSysResource bool
	// snapshotter is overlayfs where the kernel has it.
	snapshotter string
}

func detectQuirks(v2 bool) nodeQuirks {
	q := nodeQuirks{cgroupV1: !v2, snapshotter: "native"}
	if data, err := os.ReadFile("/proc/filesystems"); err == nil && strings.Contains(string(data), "\toverlay\n") {
		q.snapshotter = "overlayfs"
	}
	q.noSysResource = !hasCapability(24) // CAP_SYS_RESOURCE
	return q
}

// hasCapability reads the effective capability set of this process.
func hasCapability(bit uint) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// containerdConfig is containerd 2.x's config (version 3). CDI is always on
// in 2.x; the spec directory is the plugin's --cdi-root. The sandbox image
// is pinned to the imported node image, so nothing is ever pulled.
func containerdConfig(binDir, runc, cdiRoot, cniConfDir string, q nodeQuirks) string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %q

[plugins.'io.containerd.cri.v1.images']
  snapshotter = %q
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  cdi_spec_dirs = [%q]
  restrict_oom_score_adj = %v
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = %q
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = [%q]
    conf_dir = %q
`, containerdSocket, q.snapshotter, NodeImage, cdiRoot, q.noSysResource, runc, binDir, cniConfDir)
}

// cniConfig gives non-hostNetwork pods (the plugin's MPS daemon) a network
// namespace with a tap device and an address; it touches nothing outside the
// pod's namespace. bridge and dummy would need kernel modules that not every
// machine has.
func cniConfig(dataDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "gpufrac-e2e",
  "plugins": [{
    "type": "tap",
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "dataDir": %q}
  }]
}
`, dataDir)
}

// kubeletConfig is the KubeletConfiguration of the real node.
func kubeletConfig(cgroupRoot, clientCA string, port, healthzPort int, q nodeQuirks) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# Only on loopback: the API server reaches it there for logs and exec.
address: 127.0.0.1
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %q}
authorization: {mode: AlwaysAllow}
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
# Its own root, removed with everything under it when the node stops.
cgroupRoot: %s
failSwapOn: false
protectKernelDefaults: false
registerNode: true
resolvConf: /etc/resolv.conf
serializeImagePulls: false
# A test node on a shared disk: no evictions, no image garbage collection.
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
`, port, healthzPort, clientCA, containerdSocket, cgroupRoot)
	if q.cgroupV1 {
		b.WriteString("# This machine has cgroup v1, which the kubelet refuses by default.\nfailCgroupV1: false\n")
	}
	return b.String()
}
