package mps_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpufrac/gpufrac/pkg/mps"
	"github.com/gpufrac/gpufrac/templates"
)

// buildDouble builds test/mpsdouble as nvidia-cuda-mps-control and
// nvidia-smi into a fresh directory for PATH.
func buildDouble(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	cmd := exec.Command("go", "build", "-o", filepath.Join(bin, "nvidia-cuda-mps-control"), "../../test/mpsdouble")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the MPS double: %v\n%s", err, out)
	}
	if err := os.Symlink("nvidia-cuda-mps-control", filepath.Join(bin, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	return bin
}

// containerEnv is the container's environment with the host directories
// standing in for its mounts.
func containerEnv(c corev1.Container, bin string, dirs map[string]string) []string {
	env := []string{"PATH=" + bin + ":" + os.Getenv("PATH")}
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

func commands(t *testing.T, logDir string) []string {
	raw, _ := os.ReadFile(filepath.Join(logDir, "control.log"))
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		m := logCommand.FindStringSubmatch(line)
		// Start-up waits and probes poll get_server_list a varying number
		// of times; the sequence that matters is everything else.
		if m == nil || m[1] == "command: get_server_list" {
			continue
		}
		out = append(out, m[1])
	}
	return out
}

func TestTemplateDrivesMPSAsPinned(t *testing.T) {
	bin := buildDouble(t)
	host := t.TempDir()
	dirs := map[string]string{
		"/mps/pipe":   filepath.Join(host, "pipe"),
		"/mps/log":    filepath.Join(host, "log"),
		"/mps/config": filepath.Join(host, "config"),
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	pod, err := mps.Render(templates.MPSControlDaemon, mps.DaemonParams{
		Name: "d", Namespace: ns, NodeName: node, GPUUUID: "GPU-a", Image: "img", Version: "legacy",
		PipeDir: dirs["/mps/pipe"], LogDir: dirs["/mps/log"], ShmDir: host, ConfigDir: dirs["/mps/config"],
		PinnedMemLimitMiB: 24576,
	})
	if err != nil {
		t.Fatal(err)
	}
	daemon := pod.Spec.Containers[0]
	env := containerEnv(daemon, bin, dirs)

	// The init container, then the daemon, as the kubelet would run them.
	initC := pod.Spec.InitContainers[0]
	run := exec.Command(filepath.Join(bin, initC.Command[0]), initC.Command[1:]...)
	run.Env = env
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("init container: %v\n%s", err, out)
	}
	// No config file yet: the daemon starts with the rendered ceiling.
	cmd := exec.Command(daemon.Command[0], append(daemon.Command[1:], daemon.Args...)...)
	cmd.Env = env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() { _ = cmd.Process.Kill() }()

	applied := func(want string) {
		t.Helper()
		err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			raw, _ := os.ReadFile(filepath.Join(dirs["/mps/config"], "pinned-mem-limit-mib.applied"))
			return strings.TrimSpace(string(raw)) == want, nil
		})
		if err != nil {
			t.Fatalf("ceiling %s never applied; log: %v", want, commands(t, dirs["/mps/log"]))
		}
	}
	applied("24576")

	// The startup probe passes only while the daemon answers.
	probe := daemon.StartupProbe.Exec.Command
	p := exec.Command(probe[0], probe[1:]...)
	p.Env = env
	if out, err := p.CombinedOutput(); err != nil {
		t.Errorf("startup probe fails on a running daemon: %v\n%s", err, out)
	}

	// The plugin raises the ceiling for a larger claim.
	if err := os.WriteFile(filepath.Join(dirs["/mps/config"], mps.ConfigFile), []byte("40960\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	applied("40960")

	// Pod deletion: SIGTERM makes the script quit the daemon cleanly.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("daemon container exited with %v, want 0 after quit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("daemon container did not stop after SIGTERM")
	}
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
	if got := commands(t, dirs["/mps/log"]); !slices.Equal(got, want) {
		t.Errorf("MPS command sequence\n got: %q\nwant: %q", got, want)
	}
	p = exec.Command(probe[0], probe[1:]...)
	p.Env = env
	if err := p.Run(); err == nil {
		t.Error("startup probe passes with no daemon")
	}
	if _, err := os.Stat(filepath.Join(dirs["/mps/config"], "ready")); !os.IsNotExist(err) {
		t.Error("the ready marker outlives the daemon")
	}
}
