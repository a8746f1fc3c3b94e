// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/node/incident"
)

// fakeCUDAPod runs /fakecuda (test/fakecuda) once with args: an MPS
// client of the GPU's daemon allocating against the double's ledger.
func fakeCUDAPod(name, template string, args ...string) *v1.Pod {
	pod := probePod(name, template)
	pod.Spec.RestartPolicy = v1.RestartPolicyNever
	pod.Spec.Containers[0].Command = append([]string{"/fakecuda"}, args...)
	return pod
}

// TestEvictionUpholdsTheRequest (issue 15, point 5): on a 141Gi GPU, pod A
// (request 40Gi, limit 100Gi) borrows to 90Gi; pod B (60Gi, 60Gi) then
// allocates its 60Gi, which does not fit beside A's 90Gi. Both are MPS
// clients of the GPU's daemon (the double, with NVIDIA's documented
// eviction), so B, within its request, succeeds after the daemon evicts A,
// which is over its request: A's next CUDA call returns
// CUDA_ERROR_MPS_CLIENT_TERMINATED, its container fails, and the plugin
// reports the incident (issue 22): a Warning Event on A's claim and on pod
// a naming the GPU and B's claim, and gpufrac_incidents_total.
func TestEvictionUpholdsTheRequest(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(7)
	e.createTemplate("borrower", class, "40Gi", "memoryLimit: 100Gi\ncomputeMode: TimeSlicing\n")
	e.createTemplate("strict", class, "60Gi", "computeMode: TimeSlicing\n")
	e.createPod(fakeCUDAPod("a", "borrower", "-name", "pod-a", "alloc", "92160", "hold", "0"))
	a := e.waitRunning("a")
	g := e.gpuOf(a)
	log := filepath.Join(mpslayout.For(filepath.Join(node.PluginDataDir, "mps"), g.UUID).LogDir, "control.log")
	read := func() string { raw, _ := os.ReadFile(log); return string(raw) }
	e.poll("A's 90Gi allocation in the daemon's log "+log, func() (bool, error) {
		return strings.Contains(read(), "92160MiB ok"), nil
	})

	e.createPod(fakeCUDAPod("b", "strict", "-name", "pod-b", "alloc", "61440"))
	// B's claim is read while b has it: once b has succeeded, the
	// controller-manager deletes the claim it generated, and CI saw pod b's
	// status name another claim after that (the plugin, rightly, names the
	// one it prepared).
	var bClaim string
	e.poll("pod b's claim", func() (bool, error) {
		pb, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "b", metav1.GetOptions{})
		if err != nil || len(pb.Status.ResourceClaimStatuses) != 1 || pb.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
			return false, nil // not there yet
		}
		bClaim = *pb.Status.ResourceClaimStatuses[0].ResourceClaimName
		return true, nil
	})
	phase := func(name string) (v1.PodPhase, *v1.ContainerStateTerminated) {
		p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil || len(p.Status.ContainerStatuses) == 0 {
			return "", nil
		}
		return p.Status.Phase, p.Status.ContainerStatuses[0].State.Terminated
	}
	e.poll("pod b to succeed and pod a to fail", func() (bool, error) {
		pb, _ := phase("b")
		pa, _ := phase("a")
		return pb == v1.PodSucceeded && pa == v1.PodFailed, nil
	})
	if _, term := phase("a"); term == nil || term.ExitCode != 4 {
		t.Errorf("pod a terminated with %+v, want exit 4 (CUDA_ERROR_MPS_CLIENT_TERMINATED)", term)
	}
	// What the daemon logged and the hook recorded, for a failure's
	// diagnosis.
	records, _ := filepath.Glob(filepath.Join(node.PluginDataDir, "containers", "*", "*.json"))
	for _, l := range strings.Split(read(), "\n") {
		if strings.Contains(l, "memacct") || strings.Contains(l, "client connected") {
			t.Logf("daemon: %s", l)
		}
	}
	t.Logf("container records: %v", records)
	// The plugin reads the eviction from the daemon's log and makes it an
	// incident: a Warning Event on A's claim and on pod a naming the GPU
	// and B's claim, whose request caused it, and a count.
	neighbour := "claim " + e.ns + "/" + bClaim + ", within its 60Gi request"
	var notes []string
	e.poll("MPSClientEvicted Warning Events on pod a and its claim "+g.Claim.Name+" naming "+g.UUID+" and "+neighbour, func() (bool, error) {
		list, err := e.client.EventsV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		onClaim, onPod := false, false
		notes = nil
		for _, ev := range list.Items {
			if ev.Reason != string(incident.MPSEvicted) {
				continue
			}
			notes = append(notes, ev.Regarding.Kind+"/"+ev.Regarding.Name+" "+ev.Type+": "+ev.Note)
			if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Note, g.UUID) || !strings.Contains(ev.Note, neighbour) {
				continue
			}
			onClaim = onClaim || (ev.Regarding.Kind == "ResourceClaim" && ev.Regarding.Name == g.Claim.Name)
			onPod = onPod || (ev.Regarding.Kind == "Pod" && ev.Regarding.Name == "a")
		}
		return onClaim && onPod, nil
	})
	for _, n := range notes {
		t.Logf("event: %s", n)
	}
	for _, want := range []string{"MPS terminated container", "of pod " + e.ns + "/a", "for using more than its 40Gi request", "CUDA_ERROR_MPS_CLIENT_TERMINATED"} {
		if !strings.Contains(strings.Join(notes, "\n"), want) {
			t.Errorf("the eviction Events %q do not say %q", notes, want)
		}
	}
	if n := len(notes); n != 2 {
		t.Errorf("%d MPSClientEvicted Events, want 2 (one on the claim, one on the pod; the eviction is reported once): %q", n, notes)
	}
	e.poll("gpufrac_incidents_total{kind=MPSClientEvicted} for "+g.UUID, func() (bool, error) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "gpufrac_incidents_total{") && strings.Contains(line, `kind="`+string(incident.MPSEvicted)+`"`) &&
				strings.Contains(line, `gpu_uuid="`+g.UUID+`"`) && strings.HasSuffix(line, " 1") {
				t.Logf("metric: %s", line)
				return true, nil
			}
		}
		return false, nil
	})
	daemonLog := read()
	for _, want := range []string{
		"evicted: it used 51200MiB above its soft limit of 40960MiB",
		"eviction requested=1 performed=1 no-victim=0",
		"61440MiB ok",
	} {
		if !strings.Contains(daemonLog, want) {
			t.Errorf("the daemon's log lacks %q:\n%s", want, daemonLog)
		}
	}
}
