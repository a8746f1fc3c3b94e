// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps_test

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/mps"
	"github.com/gpufrac/gpufrac/templates"
)

// buildDouble builds gpufrac-mps-launcher and a driver root with the MPS
// double (static) at usr/bin/nvidia-cuda-mps-control and nvidia-smi and
// the script's shell (kubebuild.BuildMPSDouble): the daemon's containers
// run the production path, chroot included, which needs root.
func buildDouble(t testing.TB) (launcher, driverRoot string) {
	t.Helper()
	if os.Geteuid() != 0 {
		// CI runs as root with GPUFRAC_E2E=required: there a skip would
		// hide the only test of the production chroot path, so it fails.
		if os.Getenv("GPUFRAC_E2E") == "required" {
			t.Fatal("GPUFRAC_E2E=required, but the daemon's launcher needs root to chroot into the driver root")
		}
		t.Skip("the daemon's launcher chroots into the driver root: needs root (make test runs as root)")
	}
	dir := t.TempDir()
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if err := kubebuild.BuildMPSDouble(context.Background(), kubebuild.NewProgress(io.Discard), repo, dir); err != nil {
		t.Fatalf("building the MPS double's driver root: %v", err)
	}
	return filepath.Join(dir, kubebuild.LauncherName), filepath.Join(dir, kubebuild.DriverRootDir)
}

// argv is a container's command with the image's launcher path mapped to
// the build.
func argv(launcher string, cmd ...string) []string {
	out := slices.Clone(cmd)
	if filepath.Base(out[0]) == kubebuild.LauncherName {
		out[0] = launcher
	}
	return out
}

// containerEnv is the container's environment with the host directories
// standing in for its mounts.
func containerEnv(c corev1.Container, dirs map[string]string) []string {
	env := []string{"PATH=" + os.Getenv("PATH")}
	for _, e := range c.Env {
		v := e.Value
		if host, ok := dirs[v]; ok {
			v = host
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

var logCommand = regexp.MustCompile(`^\[[^]]+\] (.*)$`)

func commands(t testing.TB, logDir string) []string {
	raw, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		m := logCommand.FindStringSubmatch(line)
		// Start-up waits and probes poll a varying number of times; the
		// sequence that matters is everything else.
		if m == nil || m[1] == "command: get_server_list" || strings.HasPrefix(m[1], "command: -p 3 server list") {
			continue
		}
		out = append(out, m[1])
	}
	return out
}

// daemonRun is a rendered daemon Pod run as the kubelet would run it, on
// host directories standing in for its volumes, with the MPS double.
type daemonRun struct {
	t      testing.TB
	dirs   map[string]string
	env    []string
	probe  []string
	cmd    *exec.Cmd
	exited chan error
}

// env is added to the daemon's environment (the double's switches).
func startDaemon(t testing.TB, version string, settings map[string]string, env ...string) *daemonRun {
	t.Helper()
	return startDaemonOn(t, version, nil, settings, env...)
}

// startDaemonOn is startDaemon for the node server over gpus ("<uuid>=<MiB>"
// each, the double's ledger from the template's GPUFRAC_GPUS_MEMORY_MIB);
// nil gpus: GPU-a's own daemon.
func startDaemonOn(t testing.TB, version string, gpus []string, settings map[string]string, env ...string) *daemonRun {
	t.Helper()
	launcher, driverRoot := buildDouble(t)
	host := t.TempDir()
	dirs := map[string]string{
		"/mps/pipe":    filepath.Join(host, "pipe"),
		"/mps/log":     filepath.Join(host, "log"),
		"/mps/config":  filepath.Join(host, "config"),
		"/driver-root": driverRoot,
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The plugin writes its settings before it creates the Pod.
	for file, content := range settings {
		if err := os.WriteFile(filepath.Join(dirs["/mps/config"], file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	params := mps.DaemonParams{
		Name: "d", Namespace: ns, NodeName: node, GPUUUID: "GPU-a", Image: "img", DriverRoot: driverRoot, Version: version,
		PipeDir: dirs["/mps/pipe"], LogDir: dirs["/mps/log"], ShmDir: host, ConfigDir: dirs["/mps/config"],
		ServerName: "gpufrac", SafetyMemoryMiB: 64, SafetyThreadPercentage: 1,
	}
	// The double's memory ledger: the GPU's size, or the template's list.
	ledger := []string{"MPSDOUBLE_GPUS=GPU-a=81920"}
	if gpus != nil {
		ledger = nil
		params.DaemonKey, params.GPUsMemoryMiB, params.GPUs = mpslayout.NodeServerKey, strings.Join(gpus, ","), nil
		for _, g := range gpus {
			uuid, _, _ := strings.Cut(g, "=")
			params.GPUs = append(params.GPUs, uuid)
		}
		params.GPUUUID = strings.Join(params.GPUs, ",")
	}
	pod, err := mps.Render(templates.MPSControlDaemon, params)
	if err != nil {
		t.Fatal(err)
	}
	daemon := pod.Spec.Containers[0]
	env = append(append(containerEnv(daemon, dirs), ledger...), env...)
	r := &daemonRun{t: t, dirs: dirs, env: env, probe: argv(launcher, daemon.StartupProbe.Exec.Command...), exited: make(chan error, 1)}

	// The init containers, then the daemon, as the kubelet would run them.
	for _, initC := range pod.Spec.InitContainers {
		initArgv := argv(launcher, initC.Command...)
		run := exec.Command(initArgv[0], initArgv[1:]...)
		run.Env = containerEnv(initC, dirs)
		if out, err := run.CombinedOutput(); err != nil {
			t.Fatalf("init container %s: %v\n%s", initC.Name, err, out)
		}
	}
	main := argv(launcher, append(slices.Clone(daemon.Command), daemon.Args...)...)
	r.cmd = exec.Command(main[0], main[1:]...)
	r.cmd.Env = r.env
	r.cmd.Stderr = os.Stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	return r
}

// applied waits until the script reports file applied with content.
func (r *daemonRun) applied(file, want string) {
	r.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		raw, _ := os.ReadFile(filepath.Join(r.dirs["/mps/config"], file+mps.AppliedSuffix))
		return string(raw) == want, nil
	})
	if err != nil {
		r.t.Fatalf("%s %q never applied; log: %q", file, want, commands(r.t, r.dirs["/mps/log"]))
	}
}

func (r *daemonRun) set(file, content string) {
	if err := os.WriteFile(filepath.Join(r.dirs["/mps/config"], file), []byte(content), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *daemonRun) probePasses() bool {
	p := exec.Command(r.probe[0], r.probe[1:]...)
	p.Env = r.env
	return p.Run() == nil
}

// stop sends SIGTERM, as Pod deletion does, and expects a clean exit.
func (r *daemonRun) stop() {
	r.t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		r.t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		if err != nil {
			r.t.Errorf("daemon container exited with %v, want 0 after quit", err)
		}
	case <-time.After(30 * time.Second):
		r.t.Fatal("daemon container did not stop after SIGTERM")
	}
	if r.probePasses() {
		r.t.Error("startup probe passes with no daemon")
	}
	if _, err := os.Stat(filepath.Join(r.dirs["/mps/config"], "ready")); !os.IsNotExist(err) {
		r.t.Error("the ready marker outlives the daemon")
	}
}

func TestTemplateDrivesLegacyMPSAsPinned(t *testing.T) {
	r := startDaemon(t, "legacy", map[string]string{mps.ConfigFile: "24576\n"})
	r.applied(mps.ConfigFile, "24576\n")
	if !r.probePasses() {
		t.Error("startup probe fails on a running daemon")
	}
	// The plugin raises the ceiling for a larger claim.
	r.set(mps.ConfigFile, "40960\n")
	r.applied(mps.ConfigFile, "40960\n")
	r.stop()
	want := []string{
		"nvidia-smi -i GPU-a -c EXCLUSIVE_PROCESS",
		"start -f gpu=GPU-a",
		"command: get_default_active_thread_percentage",
		"command: set_default_device_pinned_mem_limit GPU-a 24576M",
		"command: get_default_device_pinned_mem_limit GPU-a",
		"command: get_default_active_thread_percentage", // the probe
		"command: set_default_device_pinned_mem_limit GPU-a 40960M",
		"command: get_default_device_pinned_mem_limit GPU-a",
		"command: quit",
		"exit",
		"nvidia-smi -i GPU-a -c DEFAULT",
	}
	if got := commands(t, r.dirs["/mps/log"]); !slices.Equal(got, want) {
		t.Errorf("MPS command sequence\n got: %q\nwant: %q", got, want)
	}
}

// MPS v3: one shared server, defined by the TOML config at start, with
// low safety limits on its default namespace, and a namespace per claim
// with its limit and thread percentage, created, changed and deleted as
// the plugin's list changes, every command line in NVIDIA's documented
// grammar (the double refuses anything else) and the state read back from
// the daemon.
func TestTemplateDrivesMPSv3Namespaces(t *testing.T) {
	toml, err := mps.DaemonTOML("615.23.01", "gpufrac", "GPU-a")
	if err != nil {
		t.Fatal(err)
	}
	r := startDaemon(t, "v3", map[string]string{mps.NamespacesFile: "c_a 24576 100\n", mps.ConfigTOMLFile: toml})
	r.applied(mps.NamespacesFile, "c_a 24576 100\n")
	nsDir := func(n string) string { return filepath.Join(r.dirs["/mps/pipe"], "gpufrac", n) }
	if fi, err := os.Stat(filepath.Join(nsDir("c_a"), "control")); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("the namespace's control socket, which the container's pipe directory must hold, is missing: %v", err)
	}
	if !r.probePasses() {
		t.Error("startup probe fails on a running daemon")
	}
	r.set(mps.NamespacesFile, "c_a 24576 100\nc_b 40960 30\n")
	r.applied(mps.NamespacesFile, "c_a 24576 100\nc_b 40960 30\n")
	r.set(mps.NamespacesFile, "c_b 40960 30\n")
	r.applied(mps.NamespacesFile, "c_b 40960 30\n")
	if _, err := os.Stat(nsDir("c_a")); !os.IsNotExist(err) {
		t.Errorf("a deleted namespace's directory remains: %v", err)
	}
	r.stop()
	// The daemon runs chrooted into the driver root, where the launcher
	// binds the config directory under its private /tmp.
	cfg := "/tmp/gpufrac-mps/gpufrac_mps_config/mps.toml"
	want := []string{
		"nvidia-smi -i GPU-a -c DEFAULT",
		"config: servers=gpufrac devices=GPU-a memacct=true context-share=true default_socket=off",
		"start -f -p 3 -m -a " + cfg + " gpu=GPU-a",
		"command: -p 3 server set gpufrac --pinned-memory-limit=64M --active-thread-percentage=1",
		// First list: create c_a.
		"command: -p 3 namespace list --server=gpufrac --format=csv,noheader",
		"command: -p 3 namespace create c_a --server=gpufrac",
		"command: -p 3 namespace set c_a --server=gpufrac --pinned-memory-limit=24576M --active-thread-percentage=100",
		"command: -p 3 namespace get c_a gpufrac pipe-directory",
		// Second list: c_a exists and is only set again; c_b is new.
		"command: -p 3 namespace list --server=gpufrac --format=csv,noheader",
		"command: -p 3 namespace set c_a --server=gpufrac --pinned-memory-limit=24576M --active-thread-percentage=100",
		"command: -p 3 namespace get c_a gpufrac pipe-directory",
		"command: -p 3 namespace create c_b --server=gpufrac",
		"command: -p 3 namespace set c_b --server=gpufrac --pinned-memory-limit=40960M --active-thread-percentage=30",
		"command: -p 3 namespace get c_b gpufrac pipe-directory",
		// Third: c_a goes, after its clients (none here).
		"command: -p 3 namespace list --server=gpufrac --format=csv,noheader",
		"command: -p 3 namespace set c_b --server=gpufrac --pinned-memory-limit=40960M --active-thread-percentage=30",
		"command: -p 3 namespace get c_b gpufrac pipe-directory",
		"command: -p 3 client list --server=gpufrac --format=csv,noheader",
		"command: -p 3 namespace delete c_a --server=gpufrac --force",
		"command: quit",
		"exit",
	}
	if got := commands(t, r.dirs["/mps/log"]); !slices.Equal(got, want) {
		t.Errorf("MPS command sequence\n got: %q\nwant: %q", got, want)
	}
}

// A claim's namespace that is no longer wanted loses its leftover clients
// (client terminate) before it is deleted, whichever row shape the
// daemon's client list prints: NVIDIA's documented one (bare namespace
// name) or the one KAI's operator read from an r615 driver
// ("<server>/<ns> (<ctx>)"). The neighbour's client, in another
// namespace, is left alone.
func TestLeftoverClientsAreTerminatedInEitherListShape(t *testing.T) {
	fakecuda := filepath.Join(t.TempDir(), "fakecuda")
	build := exec.Command("go", "build", "-o", fakecuda, "../../../test/fakecuda")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fakecuda: %v\n%s", err, out)
	}
	for _, shape := range []string{"documented", "observed-615"} {
		t.Run(shape, func(t *testing.T) {
			toml, err := mps.DaemonTOML("615.23.01", "gpufrac", "GPU-a")
			if err != nil {
				t.Fatal(err)
			}
			r := startDaemon(t, "v3", map[string]string{mps.NamespacesFile: "c_a 1024 100\nc_b 1024 100\n", mps.ConfigTOMLFile: toml},
				"MPSDOUBLE_CLIENT_LIST="+shape)
			r.applied(mps.NamespacesFile, "c_a 1024 100\nc_b 1024 100\n")
			clients := map[string]*exec.Cmd{}
			for _, n := range []string{"c_a", "c_b"} {
				c := exec.Command(fakecuda, "-device", "GPU-a", "alloc", "512", "hold", "0")
				c.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + filepath.Join(r.dirs["/mps/pipe"], "gpufrac", n)}
				out, err := c.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
				line, _ := bufio.NewReader(out).ReadString('\n')
				if !strings.Contains(line, "CUDA_SUCCESS") {
					t.Fatalf("the client of %s did not connect: %q", n, line)
				}
				clients[n] = c
			}
			r.set(mps.NamespacesFile, "c_b 1024 100\n")
			r.applied(mps.NamespacesFile, "c_b 1024 100\n")
			got := commands(t, r.dirs["/mps/log"])
			list := slices.Index(got, "command: -p 3 client list --server=gpufrac --format=csv,noheader")
			term := slices.Index(got, "command: -p 3 client terminate "+strconv.Itoa(clients["c_a"].Process.Pid))
			del := slices.Index(got, "command: -p 3 namespace delete c_a --server=gpufrac --force")
			if list < 0 || term < list || del < term {
				t.Errorf("want client list, then client terminate of c_a's client (pid %d), then namespace delete; got %q", clients["c_a"].Process.Pid, got)
			}
			if slices.Contains(got, "command: -p 3 client terminate "+strconv.Itoa(clients["c_b"].Process.Pid)) {
				t.Errorf("the neighbour's client in c_b was terminated: %q", got)
			}
			r.stop()
		})
	}
}

// The node server's rendered Pod runs on the MPS double as on a node: a
// compute-mode init container per GPU, allowed_devices over both GPUs,
// each GPU's ledger from the template's GPUFRAC_GPUS_MEMORY_MIB; a
// TimeSlicing client of both GPUs on the main socket allocates on each
// within that GPU's memory and not beyond it.
func TestTemplateRunsTheNodeServerOverTwoGPUs(t *testing.T) {
	fakecuda := filepath.Join(t.TempDir(), "fakecuda")
	build := exec.Command("go", "build", "-o", fakecuda, "../../../test/fakecuda")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building fakecuda: %v\n%s", err, out)
	}
	toml, err := mps.DaemonTOML("615.23.01", "gpufrac", "GPU-a", "GPU-b")
	if err != nil {
		t.Fatal(err)
	}
	r := startDaemonOn(t, "v3", []string{"GPU-a=1024", "GPU-b=4096"}, map[string]string{mps.NamespacesFile: "", mps.ConfigTOMLFile: toml})
	// An empty namespaces list reads like a missing .applied: wait for the
	// startup probe instead.
	for deadline := time.Now().Add(20 * time.Second); !r.probePasses(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			raw, _ := os.ReadFile(filepath.Join(r.dirs["/mps/log"], "control.log"))
			t.Fatalf("the node server never passed its startup probe; control.log:\n%s", raw)
		}
	}
	client := func(steps ...string) (string, error) {
		c := exec.Command(fakecuda, append([]string{"-device", "GPU-a,GPU-b", "-soft", "512,2048", "-hard", "1024,4096"}, steps...)...)
		c.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=" + r.dirs["/mps/pipe"]}
		out, err := c.CombinedOutput()
		return string(out), err
	}
	if out, err := client("alloc", "512", "on", "GPU-b", "alloc", "3072"); err != nil || strings.Count(out, "CUDA_SUCCESS") != 3 {
		t.Errorf("a client of both GPUs: %v\n%s", err, out)
	}
	if out, err := client("alloc", "2048"); err == nil || !strings.Contains(out, "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("2048 MiB on GPU-a, a GPU of 1024 MiB: %v\n%s, want out of memory", err, out)
	}
	r.stop()
}
