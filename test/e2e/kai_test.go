// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// TestKAISMSharingComputeRequestHoldsTheSMCap: a pod written for KAI with
// NvFractions annotations, gpu-compute.mode: sm-sharing and a compute
// request of a quarter GPU is translated by gpufrac-controller's webhook
// (its template made by the controller's loop) and runs on the real node;
// the claim's CDI output gives the container its MPS namespace with a
// thread percentage of 25, and the GPU's MPS daemon applied that
// percentage to the claim's namespace, daemon-side, where the container
// cannot change it.
func TestKAISMSharingComputeRequestHoldsTheSMCap(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(6)
	w, err := cp.StartWebhook(e.ctx, e.ns, kai.Options{TimeSlicingClass: class, SMSharingClass: class})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("stopping the webhook: %v", err)
		}
	})
	pod := probePod("kai-sm", "")
	pod.Spec.SchedulerName = "kai-scheduler"
	pod.Annotations = map[string]string{
		"nvidia.com/container.main.gpu-memory.request":  "20Gi",
		"nvidia.com/container.main.gpu-compute.mode":    "sm-sharing",
		"nvidia.com/container.main.gpu-compute.request": "0.25",
	}
	created := e.createPod(pod)
	if len(created.Spec.ResourceClaims) != 1 || created.Spec.SchedulerName != "default-scheduler" {
		t.Fatalf("the pod was not translated: claims %+v, schedulerName %q", created.Spec.ResourceClaims, created.Spec.SchedulerName)
	}
	running := e.waitRunning("kai-sm")
	g := e.gpuOf(running)
	s := e.probe(running)
	e.checkSees(s, g, 20, 20)
	// The claim's CDI output: the MPS client settings of its namespace.
	if got := s.Env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"]; got != "25" {
		t.Errorf("container sees CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%q, want 25", got)
	}
	if s.Env["CUDA_MPS_PIPE_DIRECTORY"] == "" || !strings.Contains(strings.Join(s.MPSPipe, " "), "control") {
		t.Errorf("the container is not a client of an MPS namespace: pipe %q holds %v", s.Env["CUDA_MPS_PIPE_DIRECTORY"], s.MPSPipe)
	}

	// The daemon's side: the namespace it applied carries the percentage.
	daemons, err := e.client.CoreV1().Pods(harness.MPSNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/gpu=" + g.UUID})
	if err != nil || len(daemons.Items) != 1 {
		t.Fatalf("want one MPS daemon Pod for GPU %s, got %v %v", g.UUID, daemons, err)
	}
	dirs := map[string]string{}
	for _, v := range daemons.Items[0].Spec.Volumes {
		if v.HostPath != nil {
			dirs[v.Name] = v.HostPath.Path
		}
	}
	applied := ""
	e.poll("the MPS daemon to apply the claim's namespace", func() (bool, error) {
		raw, err := os.ReadFile(filepath.Join(dirs["config"], "namespaces.applied"))
		if err != nil {
			return false, nil
		}
		applied = string(raw)
		for _, line := range strings.Split(applied, "\n") {
			// "<namespace> <MiB> <percent>", one line per SMSharing claim.
			if f := strings.Fields(line); len(f) == 3 && f[2] == "25" {
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("MPS daemon applied namespaces: %q", strings.TrimSpace(applied))
	log, err := os.ReadFile(filepath.Join(dirs["log"], "control.log"))
	if err != nil {
		t.Fatalf("the MPS daemon's control log: %v", err)
	}
	if !strings.Contains(string(log), "active-thread-percentage=25") {
		t.Errorf("the MPS daemon never set a namespace to 25%% of the SMs; its control log:\n%s", log)
	}
}
