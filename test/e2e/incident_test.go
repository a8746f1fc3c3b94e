// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

// TestMemoryIncidentsAreVisible: a 40Gi/60Gi TimeSlicing container on the
// real node (the hook set its limits on its real cgroup) is made to use
// 50Gi, then 60Gi, then 10Gi through the simulated NVML's per-cgroup use.
// The plugin reports borrowing and then the hard limit as Warning Events on
// the claim and on the pod naming the GPU, as conditions on the claim's
// status.devices, and in gpufrac_incidents_total and the claim's
// gpufrac_fraction_incidents_total; back within its request,
// both conditions turn False.
func TestMemoryIncidentsAreVisible(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("burst", e.classFor(6), "40Gi", "memoryLimit: 60Gi\ncomputeMode: TimeSlicing\n")
	e.createPod(probePod("burst", "burst"))
	pod := e.waitRunning("burst")
	g := e.gpuOf(pod)
	hook := e.checkHook(pod, g, 40*gib, 60*gib)

	usage := filepath.Join(node.PluginDataDir, gpusim.UsageFile)
	t.Cleanup(func() { _ = os.Remove(usage) })
	use := func(bytes int64) {
		raw, _ := json.Marshal(map[string]map[string]int64{g.UUID: {hook.Cgroup: bytes}})
		if err := os.WriteFile(usage, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitEvents := func(kind incident.Kind, fragment string) {
		t.Helper()
		e.poll("Warning Events "+string(kind)+" on the claim and the pod", func() (bool, error) {
			list, err := e.client.EventsV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			onClaim, onPod := false, false
			for _, ev := range list.Items {
				if ev.Reason != string(kind) || ev.Type != "Warning" || !strings.Contains(ev.Note, g.UUID) || !strings.Contains(ev.Note, fragment) {
					continue
				}
				onClaim = onClaim || (ev.Regarding.Kind == "ResourceClaim" && ev.Regarding.Name == g.Claim.Name)
				onPod = onPod || (ev.Regarding.Kind == "Pod" && ev.Regarding.Name == pod.Name)
				if onClaim && onPod {
					t.Logf("event: %s %s: %s", ev.Type, ev.Reason, ev.Note)
				}
			}
			return onClaim && onPod, nil
		})
	}
	condition := func(kind incident.Kind, want metav1.ConditionStatus) {
		t.Helper()
		e.poll("condition "+string(kind)+"="+string(want)+" on the claim's status.devices", func() (bool, error) {
			c, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, g.Claim.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, d := range c.Status.Devices {
				if d.Driver == driver && apimeta.IsStatusConditionPresentAndEqual(d.Conditions, string(kind), want) &&
					apimeta.IsStatusConditionTrue(d.Conditions, "Ready") {
					return true, nil
				}
			}
			return false, nil
		})
	}
	// Counted per GPU, and per share under the claim's UID.
	counted := func(kind incident.Kind) {
		t.Helper()
		e.poll("gpufrac_incidents_total and gpufrac_fraction_incidents_total for "+string(kind), func() (bool, error) {
			resp, err := http.Get("http://" + metricsAddr + "/metrics")
			if err != nil {
				return false, nil
			}
			defer func() { _ = resp.Body.Close() }()
			raw, _ := io.ReadAll(resp.Body)
			perGPU, perShare := false, false
			for _, line := range strings.Split(string(raw), "\n") {
				if !strings.Contains(line, `kind="`+string(kind)+`"`) || !strings.Contains(line, `gpu_uuid="`+g.UUID+`"`) || strings.HasSuffix(line, " 0") {
					continue
				}
				switch {
				case strings.HasPrefix(line, "gpufrac_incidents_total{"):
					perGPU = true
				case strings.HasPrefix(line, "gpufrac_fraction_incidents_total{") && strings.Contains(line, `claim_uid="`+string(g.Claim.UID)+`"`):
					perShare = true
				default:
					continue
				}
				t.Logf("metric: %s", line)
			}
			return perGPU && perShare, nil
		})
	}

	use(50 * gib)
	waitEvents(incident.Borrowing, "uses 50Gi, above its 40Gi request")
	condition(incident.Borrowing, metav1.ConditionTrue)
	counted(incident.Borrowing)

	// More than the hard limit cannot be held: the driver stops at 60Gi.
	use(70 * gib)
	waitEvents(incident.AtHardLimit, "uses 60Gi of its 60Gi hard limit")
	condition(incident.AtHardLimit, metav1.ConditionTrue)
	counted(incident.AtHardLimit)

	use(10 * gib)
	condition(incident.AtHardLimit, metav1.ConditionFalse)
	condition(incident.Borrowing, metav1.ConditionFalse)
}
