// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"os"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// TestTimeSlicingPodSeesItsGPU: a pod with a 40Gi/60Gi TimeSlicing claim
// runs on the real node; its container sees the GPU's uuid, the memory
// variables, its device node and the GPU's MPS daemon, and the hook ran
// for its cgroup with soft 40Gi and hard 60Gi.
func TestTimeSlicingPodSeesItsGPU(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("llm-40g", e.classFor(0), "40Gi", "memoryLimit: 60Gi\ncomputeMode: TimeSlicing\n")
	e.createPod(probePod("llm", "llm-40g"))
	pod := e.waitRunning("llm")
	g := e.gpuOf(pod)
	s := e.probe(pod)
	e.checkSees(s, g, 40, 60)
	// On r615 nodes (the simulated driver) every fraction is an MPS
	// client: a TimeSlicing container gets the GPU daemon's pipe
	// directory, whose main control socket routes it to a server of its
	// own.
	if s.Env["CUDA_MPS_PIPE_DIRECTORY"] != cdispec.ContainerMPSPipeDir || !slices.Contains(s.MPSPipe, "control") {
		t.Errorf("a TimeSlicing container sees CUDA_MPS_PIPE_DIRECTORY=%q holding %v, want %s with the daemon's control socket",
			s.Env["CUDA_MPS_PIPE_DIRECTORY"], s.MPSPipe, cdispec.ContainerMPSPipeDir)
	}
	e.checkHook(pod, g, 40*gib, 60*gib)
	e.checkContainerMetric(pod, g)
}

// TestSMSharingPodGetsTheMPSPipe: an SMSharing claim makes the plugin start
// the GPU's MPS daemon Pod on the real node (the MPS double in the node
// image); the client container gets its MPS namespace's pipe directory
// mounted once the daemon created the namespace.
func TestSMSharingPodGetsTheMPSPipe(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("mps-20g", e.classFor(1), "20Gi", "memoryLimit: 30Gi\ncomputeMode: SMSharing\n")
	e.createPod(probePod("mps", "mps-20g"))
	pod := e.waitRunning("mps")
	g := e.gpuOf(pod)
	s := e.probe(pod)
	e.checkSees(s, g, 20, 30)
	if s.Env["CUDA_MPS_PIPE_DIRECTORY"] != cdispec.ContainerMPSPipeDir {
		t.Errorf("container sees CUDA_MPS_PIPE_DIRECTORY=%q, want %s", s.Env["CUDA_MPS_PIPE_DIRECTORY"], cdispec.ContainerMPSPipeDir)
	}
	if !slices.Contains(s.Mounts, cdispec.ContainerMPSPipeDir) {
		t.Errorf("%s is not a mount in the container: %v", cdispec.ContainerMPSPipeDir, s.Mounts)
	}
	// MPS v3 (the simulated driver is r615): the container's pipe
	// directory is its claim's namespace on the shared server, holding
	// that namespace's control socket and nothing of the daemon's own.
	if !slices.Contains(s.MPSPipe, "control") || slices.Contains(s.MPSPipe, "control.sock") {
		t.Errorf("the container's pipe directory holds %v, want only its MPS namespace's control socket", s.MPSPipe)
	}
	daemons, err := e.client.CoreV1().Pods(harness.MPSNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/gpu=" + g.UUID})
	if err != nil || len(daemons.Items) != 1 || daemons.Items[0].Status.Phase != v1.PodRunning || daemons.Items[0].Spec.NodeName != node.Name {
		t.Errorf("want one Running MPS daemon Pod for GPU %s on %s, got %v %v", g.UUID, node.Name, daemons, err)
	} else {
		t.Logf("MPS daemon Pod %s Running on the real node", daemons.Items[0].Name)
	}
	e.checkHook(pod, g, 20*gib, 30*gib)
}

// TestTwoPodsShareOneGPU: two pods with shares of the same GPU both run,
// each with its own cgroup limits.
func TestTwoPodsShareOneGPU(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(2)
	e.createTemplate("half", class, "60Gi", "memoryLimit: 70Gi\n")
	e.createTemplate("third", class, "40Gi", "")
	e.createPod(probePod("a", "half"))
	e.createPod(probePod("b", "third"))
	a, b := e.waitRunning("a"), e.waitRunning("b")
	ga, gb := e.gpuOf(a), e.gpuOf(b)
	if ga.UUID != gb.UUID {
		t.Fatalf("pods on GPUs %s and %s, want one", ga.UUID, gb.UUID)
	}
	e.checkSees(e.probe(a), ga, 60, 70)
	e.checkSees(e.probe(b), gb, 40, 40)
	ra, rb := e.checkHook(a, ga, 60*gib, 70*gib), e.checkHook(b, gb, 40*gib, 40*gib)
	if ra.Cgroup == rb.Cgroup {
		t.Errorf("both containers' limits went to cgroup %s", ra.Cgroup)
	}
}

// TestKAIAnnotatedPodRuns: a pod with KAI's annotations and no claim is
// translated by gpufrac-controller's webhook and runs on the real node with
// the share the annotations asked for.
func TestKAIAnnotatedPodRuns(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(3)
	w, err := cp.StartWebhook(e.ctx, e.ns, kai.Options{TimeSlicingClass: class, SMSharingClass: class})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			t.Errorf("stopping the webhook: %v", err)
		}
	})
	pod := probePod("kai", "")
	pod.Annotations = map[string]string{
		"nvidia.com/container.main.gpu-memory.request": "20Gi",
		"nvidia.com/container.main.gpu-memory.limit":   "30Gi",
	}
	created := e.createPod(pod)
	if len(created.Spec.ResourceClaims) != 1 {
		t.Fatalf("the pod was not translated: %+v", created.Spec.ResourceClaims)
	}
	running := e.waitRunning("kai")
	g := e.gpuOf(running)
	e.checkSees(e.probe(running), g, 20, 30)
	e.checkHook(running, g, 20*gib, 30*gib)
}

// TestDeletedPodIsUnprepared: deleting a pod makes the real kubelet call
// NodeUnprepareResources; the claim's CDI spec goes.
func TestDeletedPodIsUnprepared(t *testing.T) {
	e := newEnv(t)
	e.createTemplate("short", e.classFor(4), "10Gi", "")
	e.createPod(probePod("short", "short"))
	pod := e.waitRunning("short")
	g := e.gpuOf(pod)
	spec := specPath(g.Claim)
	if _, err := os.Stat(spec); err != nil {
		t.Fatalf("the running pod's CDI spec: %v", err)
	}
	e.deletePod("short")
	e.poll("the CDI spec "+spec+" to be removed by Unprepare", func() (bool, error) {
		_, err := os.Stat(spec)
		return os.IsNotExist(err), nil
	})
}

// TestPluginRestartLosesNothing: restarting the plugin while a pod runs
// leaves the container running untouched and its claim prepared; the
// restarted plugin prepares new pods and unprepares the old one.
func TestPluginRestartLosesNothing(t *testing.T) {
	e := newEnv(t)
	class := e.classFor(5)
	e.createTemplate("keep", class, "30Gi", "memoryLimit: 50Gi\n")
	e.createPod(probePod("before", "keep"))
	before := e.waitRunning("before")
	g := e.gpuOf(before)
	spec := specPath(g.Claim)

	if err := node.RestartPlugin(e.ctx); err != nil {
		t.Fatalf("restarting the plugin: %v", err)
	}
	after, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, "before", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	st := after.Status.ContainerStatuses[0]
	if st.State.Running == nil || st.RestartCount != 0 || st.ContainerID != before.Status.ContainerStatuses[0].ContainerID {
		t.Errorf("the running container was disturbed by the restart: %+v", st)
	}
	if _, err := os.Stat(spec); err != nil {
		t.Errorf("the running pod's CDI spec is gone after the restart: %v", err)
	}
	e.createPod(probePod("after", "keep"))
	next := e.waitRunning("after")
	gn := e.gpuOf(next)
	e.checkSees(e.probe(next), gn, 30, 50)
	e.checkHook(next, gn, 30*gib, 50*gib)

	e.deletePod("before")
	e.poll("the old pod's CDI spec to be removed by the restarted plugin", func() (bool, error) {
		_, err := os.Stat(spec)
		return os.IsNotExist(err), nil
	})
}
