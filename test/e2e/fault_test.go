// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/node/incident"
)

// TestFatalFaultIncidents (issue 22, "an MPS client terminated or
// wedged"): pod c holds memory on a GPU and, like a process that ignores
// errors, stays connected after a failure; pod f, on the same GPU, raises
// a fatal GPU exception. NVIDIA's MPS error containment reports it to
// every client of the GPU, so the daemon (the double) terminates c too,
// and takes no new client on the GPU until c exits: pod n, arriving then,
// is refused. The plugin reads both from the daemon's log: an
// MPSClientTerminated incident on c's claim and pod naming f's claim, and
// an MPSClientWedged one on n's naming c's, each counted.
func TestFatalFaultIncidents(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("ts", e.classFor(4), "10Gi", "memoryLimit: 20Gi\ncomputeMode: TimeSlicing\n")
	e.createPod(fakeCUDAPod("c", "ts", "-name", "pod-c", "-linger", "10m", "alloc", "1024", "hold", "0"))
	c := e.waitRunning("c")
	g := e.gpuOf(c)
	e.createPod(fakeCUDAPod("f", "ts", "-name", "pod-f", "fault", "illegal-address"))
	e.waitPhase("f", v1.PodFailed)
	e.checkIncident(incident.MPSTerminated, g.UUID, g.Claim.Name, "c", "because of claim "+e.ns+"/"+e.claimOf("f"), "fatal GPU exception raised by pid")

	e.createPod(fakeCUDAPod("n", "ts", "-name", "pod-n", "alloc", "1024"))
	e.waitPhase("n", v1.PodFailed)
	n, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if st := n.Status.ContainerStatuses; len(st) != 1 || st[0].State.Terminated == nil || st[0].State.Terminated.ExitCode != 2 {
		t.Errorf("pod n: %+v, want exit 2 (its MPS connection refused)", st)
	}
	e.checkIncident(incident.MPSWedged, g.UUID, e.claimOf("n"), "n",
		"a client of claim "+e.ns+"/"+g.Claim.Name+" has not", "CUDA_ERROR_MPS_SERVER_NOT_READY")
}

// claimOf is the name of the pod's one generated claim.
func (e *env) claimOf(pod string) string {
	e.t.Helper()
	p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, pod, metav1.GetOptions{})
	if err != nil || len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		e.t.Fatalf("pod %s's claim: %v %+v", pod, err, p)
	}
	return *p.Status.ResourceClaimStatuses[0].ResourceClaimName
}

func (e *env) waitPhase(pod string, phase v1.PodPhase) {
	e.t.Helper()
	e.poll("pod "+pod+" "+string(phase), func() (bool, error) {
		p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, pod, metav1.GetOptions{})
		return err == nil && p.Status.Phase == phase, nil
	})
}

// checkIncident waits for kind's Warning Events on the claim and on the
// pod, each naming the GPU and every fragment, and for the kind's count on
// the GPU.
func (e *env) checkIncident(kind incident.Kind, uuid, claim, pod string, fragments ...string) {
	e.t.Helper()
	t := e.t
	var notes []string
	e.poll(string(kind)+" Warning Events on pod "+pod+" and claim "+claim+" naming "+uuid, func() (bool, error) {
		list, err := e.client.EventsV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		onClaim, onPod := false, false
		notes = nil
		for _, ev := range list.Items {
			if ev.Reason != string(kind) {
				continue
			}
			notes = append(notes, ev.Regarding.Kind+"/"+ev.Regarding.Name+" "+ev.Type+": "+ev.Note)
			if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Note, uuid) || !containsAll(ev.Note, fragments) {
				continue
			}
			onClaim = onClaim || (ev.Regarding.Kind == "ResourceClaim" && ev.Regarding.Name == claim)
			onPod = onPod || (ev.Regarding.Kind == "Pod" && ev.Regarding.Name == pod)
		}
		return onClaim && onPod, nil
	})
	for _, n := range notes {
		t.Logf("event: %s", n)
	}
	e.poll("gpufrac_incidents_total{kind="+string(kind)+"} for "+uuid, func() (bool, error) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "gpufrac_incidents_total{") && strings.Contains(line, `kind="`+string(kind)+`"`) &&
				strings.Contains(line, `gpu_uuid="`+uuid+`"`) && !strings.HasSuffix(line, " 0") {
				t.Logf("metric: %s", line)
				return true, nil
			}
		}
		return false, nil
	})
}

func containsAll(s string, fragments []string) bool {
	for _, f := range fragments {
		if !strings.Contains(s, f) {
			return false
		}
	}
	return true
}
