// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
)

// tenantReport is what a hostile container (/probe tenant, test/e2e/e2e-probe)
// found and tried.
type tenantReport struct {
	pod      string
	shmWrite string   // "ok" or the error
	shmMount []string // major:minor, fstype, source, mount options, super options
	shmSize  string   // its size in bytes (statfs)
	shm      []string // files in its /dev/shm
	socks    []string // unix sockets anywhere in its file system
	logs     []string // files named like the MPS daemon's logs
	tries    map[string]string
	env      map[string]string
}

// tenantPod runs a hostile tenant with a claim from template: it leaves
// mark in its /dev/shm and tries each "<op>:<path>".
func tenantPod(name, template, mark string, tries ...string) *v1.Pod {
	pod := probePod(name, template)
	pod.Spec.Containers[0].Args = append([]string{"tenant", mark}, tries...)
	return pod
}

func (e *env) tenant(pod *v1.Pod) tenantReport {
	e.t.Helper()
	var out string
	e.poll("the tenant report of pod "+pod.Name, func() (bool, error) {
		var err error
		out, err = node.ContainerLog(pod, "main")
		return err == nil && strings.Contains(out, "PROBE END"), nil
	})
	r := tenantReport{pod: pod.Name, tries: map[string]string{}, env: map[string]string{}}
	for _, line := range strings.Split(out, "\n") {
		kind, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
		switch kind {
		case "ENV":
			k, v, _ := strings.Cut(rest, "=")
			r.env[k] = v
		case "SHMWRITE":
			_, r.shmWrite, _ = strings.Cut(rest, " ")
		case "SHMMOUNT":
			r.shmMount = strings.Fields(rest)
		case "SHMSIZE":
			r.shmSize = rest
		case "SHM":
			r.shm = append(r.shm, rest)
		case "SOCK":
			r.socks = append(r.socks, rest)
		case "LOG":
			r.logs = append(r.logs, rest)
		case "TRY":
			if f := strings.Fields(rest); len(f) == 3 {
				r.tries[f[0]+":"+f[1]] = f[2]
			}
		}
	}
	e.t.Logf("tenant %s: shm %v mount %v sockets %v logs %v tries %v", pod.Name, r.shm, r.shmMount, r.socks, r.logs, r.tries)
	return r
}

// wantShmOfItsOwn checks that the tenant's /dev/shm is a capped tmpfs
// with nosuid, nodev and noexec that it can write and holds its mark
// alone.
func (e *env) wantShmOfItsOwn(r tenantReport, mark string) {
	e.t.Helper()
	// The plugin runs with the default --shm-size: half of the node's
	// memory, which the kernel rounds up to whole pages.
	size, err := cdispec.ShmSize("", "/proc/meminfo")
	if err != nil {
		e.t.Fatal(err)
	}
	page := int64(os.Getpagesize())
	if want := strconv.FormatInt((size+page-1)/page*page, 10); r.shmSize != want {
		e.t.Errorf("tenant %s's /dev/shm holds %s bytes, want the cap %s", r.pod, r.shmSize, want)
	}
	if r.shmWrite != "ok" {
		e.t.Errorf("tenant %s cannot write its own /dev/shm: %s", r.pod, r.shmWrite)
	}
	if len(r.shmMount) != 5 || r.shmMount[1] != "tmpfs" || r.shmMount[2] != cdispec.ShmSource {
		e.t.Errorf("tenant %s's /dev/shm is %v, want a tmpfs from %s", r.pod, r.shmMount, cdispec.ShmSource)
	} else {
		opts := strings.Split(r.shmMount[3], ",")
		for _, want := range []string{"nosuid", "nodev", "noexec"} {
			if !slices.Contains(opts, want) {
				e.t.Errorf("tenant %s's /dev/shm options %v lack %s", r.pod, opts, want)
			}
		}
	}
	if !slices.Equal(r.shm, []string{mark}) {
		e.t.Errorf("tenant %s's /dev/shm holds %v, want its own %s alone", r.pod, r.shm, mark)
	}
}

// TestTenantsCannotReadEachOthersShm (issue 33, item 4): hostile tenants
// on a real node, all clients of GPU 2's MPS v3 daemon: claims b and c are
// SMSharing (each in its own namespace of the shared server), claim a is
// TimeSlicing (the main socket; v3 keeps the GPU in DEFAULT compute mode,
// so both kinds share it). Each writes a file into its /dev/shm: each sees
// its own file alone, on a tmpfs of its own (three different devices, so
// no file of one is in another's), capped and nosuid,nodev,noexec. Neither
// a nor c can find or connect to b's namespace socket, which is on the
// host; a finds no socket of the shared server at all, but both reach
// their own route. Against the spec before issue 33 (one host shm directory per
// GPU bound into every client, the whole pipe tree for TimeSlicing) b and
// c share a device and see each other's files, and a lists the shared
// server's sockets.
func TestTenantsCannotReadEachOthersShm(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(2)
	e.createTemplate("sm", class, "20Gi", "memoryLimit: 20Gi\ncomputeMode: SMSharing\n")
	e.createTemplate("ts", class, "20Gi", "memoryLimit: 20Gi\ncomputeMode: TimeSlicing\n")
	b := e.waitRunning(e.createPod(tenantPod("b", "sm", "secret-of-b")).Name)
	gb := e.gpuOf(b)
	rb := e.tenant(b)
	nsB := mpslayout.NamespaceFor(gb.Claim.UID)
	binding := mpslayout.For(filepath.Join(node.PluginDataDir, "mps"), gb.UUID)
	hostSocketB := filepath.Join(binding.PipeDir, mpslayout.ServerName, nsB, "control")
	if _, err := os.Stat(hostSocketB); err != nil {
		t.Fatalf("b's namespace socket is not on the host, so the test proves nothing: %v", err)
	}
	// Where b's socket would be inside another client, by every route.
	socketB := []string{
		"connect:" + filepath.Join(cdispec.ContainerMPSPipeDir, mpslayout.ServerName, nsB, "control"),
		"connect:" + filepath.Join(cdispec.ContainerMPSPipeDir, nsB, "control"),
		"connect:" + filepath.Join(filepath.Dir(cdispec.ContainerMPSPipeDir), nsB, "control"),
	}
	c := e.waitRunning(e.createPod(tenantPod("c", "sm", "secret-of-c",
		append([]string{"read:/dev/shm/secret-of-b", "connect:" + filepath.Join(cdispec.ContainerMPSPipeDir, "control")}, socketB...)...)).Name)
	a := e.waitRunning(e.createPod(tenantPod("a", "ts", "secret-of-a",
		append([]string{"read:/dev/shm/secret-of-b", "connect:" + filepath.Join(cdispec.ContainerMPSPipeDir, "control")}, socketB...)...)).Name)
	if gc, ga := e.gpuOf(c), e.gpuOf(a); gc.UUID != gb.UUID || ga.UUID != gb.UUID {
		t.Fatalf("a, b and c on GPUs %s, %s and %s, want one", ga.UUID, gb.UUID, gc.UUID)
	}
	rc, ra := e.tenant(c), e.tenant(a)

	e.wantShmOfItsOwn(rb, "secret-of-b")
	e.wantShmOfItsOwn(rc, "secret-of-c")
	e.wantShmOfItsOwn(ra, "secret-of-a")
	devs := map[string]string{}
	for _, r := range []tenantReport{ra, rb, rc} {
		if len(r.shmMount) == 0 {
			continue
		}
		if other, ok := devs[r.shmMount[0]]; ok {
			t.Errorf("tenants %s and %s share the /dev/shm file system %s", other, r.pod, r.shmMount[0])
		}
		devs[r.shmMount[0]] = r.pod
	}
	for _, r := range []tenantReport{ra, rc} {
		if got := r.tries["read:/dev/shm/secret-of-b"]; got == "ok" {
			t.Errorf("tenant %s read b's shm file", r.pod)
		}
		for _, try := range socketB {
			if got := r.tries[try]; got == "ok" || got == "" {
				t.Errorf("tenant %s: %s = %q, want an error (b's namespace socket)", r.pod, try, got)
			}
		}
		for _, s := range r.socks {
			if strings.Contains(s, nsB) {
				t.Errorf("tenant %s finds b's namespace socket at %s", r.pod, s)
			}
		}
		// Its own route still works: the mounts hide, they do not break.
		if got := r.tries["connect:"+filepath.Join(cdispec.ContainerMPSPipeDir, "control")]; got != "ok" {
			t.Errorf("tenant %s cannot reach its own MPS route: %s", r.pod, got)
		}
	}
	// An SMSharing client sees its namespace's socket alone.
	if want := []string{filepath.Join(cdispec.ContainerMPSPipeDir, "control")}; !slices.Equal(rc.socks, want) {
		t.Errorf("SMSharing tenant c finds sockets %v, want its namespace's %v alone", rc.socks, want)
	}
	// A TimeSlicing client sees nothing of the shared server.
	for _, s := range ra.socks {
		if strings.HasPrefix(s, cdispec.SharedServerDir+"/") {
			t.Errorf("TimeSlicing tenant a finds the shared server's socket %s", s)
		}
	}
}

// TestTenantsCannotWriteTheDaemonLog (issue 33, item 4): the MPS daemon's
// log, which the plugin reads incidents from (internal/node/mps/evictions.go),
// is in no client. A TimeSlicing and an SMSharing tenant look for it and
// append a forged eviction line where MPS's documented default and the old
// spec put it; the daemon's log on the host has none of it, and no
// container has CUDA_MPS_LOG_DIRECTORY. Against the spec before issue 33
// (the log directory bound read-write into every client) the forged line
// lands in the daemon's log.
func TestTenantsCannotWriteTheDaemonLog(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(1)
	e.createTemplate("sm", class, "10Gi", "computeMode: SMSharing\n")
	e.createTemplate("ts", class, "10Gi", "memoryLimit: 20Gi\ncomputeMode: TimeSlicing\n")
	forge := []string{"append:/var/log/nvidia-mps/control.log", "read:/var/log/nvidia-mps/control.log"}
	pods := []*v1.Pod{
		e.waitRunning(e.createPod(tenantPod("sm", "sm", "sm", forge...)).Name),
		e.waitRunning(e.createPod(tenantPod("ts", "ts", "ts", forge...)).Name),
	}
	for _, pod := range pods {
		r := e.tenant(pod)
		g := e.gpuOf(pod)
		hostLog := filepath.Join(mpslayout.For(filepath.Join(node.PluginDataDir, "mps"), g.UUID).LogDir, "control.log")
		raw, err := os.ReadFile(hostLog)
		if err != nil || len(raw) == 0 {
			t.Fatalf("GPU %s's daemon has no log at %s, so the test proves nothing: %v", g.UUID, hostLog, err)
		}
		if strings.Contains(string(raw), "forged") {
			t.Errorf("tenant %s wrote into the daemon's log %s", pod.Name, hostLog)
		}
		if len(r.logs) > 0 {
			t.Errorf("tenant %s finds MPS logs %v", pod.Name, r.logs)
		}
		if got := r.tries["read:/var/log/nvidia-mps/control.log"]; got == "ok" || got == "" {
			t.Errorf("tenant %s reads a control.log at MPS's default log directory: %q", pod.Name, got)
		}
		s := r.env
		if v, ok := s["CUDA_MPS_LOG_DIRECTORY"]; ok {
			t.Errorf("tenant %s has CUDA_MPS_LOG_DIRECTORY=%s", pod.Name, v)
		}
		if s["CUDA_MPS_PIPE_DIRECTORY"] != cdispec.ContainerMPSPipeDir {
			t.Errorf("tenant %s is not an MPS client (CUDA_MPS_PIPE_DIRECTORY=%q), so the test proves nothing", pod.Name, s["CUDA_MPS_PIPE_DIRECTORY"])
		}
	}
}
