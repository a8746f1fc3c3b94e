package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/pkg/incident"
)

// TestFatalFaultIsAnIncident (issue 22, "an MPS client terminated"): pod
// c holds memory on a GPU; pod f, on the same GPU, raises a fatal GPU
// exception. NVIDIA's MPS error containment reports the exception to every
// client of the GPU, so the daemon (the double) terminates c too. The
// plugin reads the termination from the daemon's log and reports it on c's
// claim and pod, naming the GPU and f's claim, and counts it.
func TestFatalFaultIsAnIncident(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("ts", e.classFor(4), "10Gi", "memoryLimit: 20Gi\ncomputeMode: TimeSlicing\n")
	e.createPod(fakeCUDAPod("c", "ts", "-name", "pod-c", "alloc", "1024", "hold", "0"))
	c := e.waitRunning("c")
	g := e.gpuOf(c)
	e.createPod(fakeCUDAPod("f", "ts", "-name", "pod-f", "fault", "illegal-address"))
	e.poll("pods c and f to fail", func() (bool, error) {
		done := 0
		for _, name := range []string{"c", "f"} {
			p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
			if err == nil && p.Status.Phase == v1.PodFailed {
				done++
			}
		}
		return done == 2, nil
	})
	f, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "f", metav1.GetOptions{})
	if err != nil || len(f.Status.ResourceClaimStatuses) != 1 || f.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod f's claim: %v %+v", err, f)
	}
	neighbour := "because of claim " + e.ns + "/" + *f.Status.ResourceClaimStatuses[0].ResourceClaimName
	var notes []string
	e.poll("MPSClientTerminated Warning Events on pod c and its claim naming "+g.UUID+" and pod f's claim", func() (bool, error) {
		list, err := e.client.EventsV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		onClaim, onPod := false, false
		notes = nil
		for _, ev := range list.Items {
			if ev.Reason != string(incident.MPSTerminated) {
				continue
			}
			notes = append(notes, ev.Regarding.Kind+"/"+ev.Regarding.Name+" "+ev.Type+": "+ev.Note)
			if ev.Type != v1.EventTypeWarning || !strings.Contains(ev.Note, g.UUID) || !strings.Contains(ev.Note, neighbour) ||
				!strings.Contains(ev.Note, "fatal GPU exception raised by pid") {
				continue
			}
			onClaim = onClaim || (ev.Regarding.Kind == "ResourceClaim" && ev.Regarding.Name == g.Claim.Name)
			onPod = onPod || (ev.Regarding.Kind == "Pod" && ev.Regarding.Name == "c")
		}
		return onClaim && onPod, nil
	})
	for _, n := range notes {
		t.Logf("event: %s", n)
	}
	e.poll("gpufrac_incidents_total{kind=MPSClientTerminated} for "+g.UUID, func() (bool, error) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "gpufrac_incidents_total{") && strings.Contains(line, `kind="`+string(incident.MPSTerminated)+`"`) &&
				strings.Contains(line, `gpu_uuid="`+g.UUID+`"`) && !strings.HasSuffix(line, " 0") {
				t.Logf("metric: %s", line)
				return true, nil
			}
		}
		return false, nil
	})
}
