// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"fmt"
	"os"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
)

func typesUID(s string) types.UID { return types.UID(s) }

// runningContainer is a container that must survive upgrade and rollback
// untouched.
type runningContainer struct {
	role        string
	namespace   string
	pod         string
	podUID      types.UID
	containerID string
	// claimUID and spec for workload pods: the claim stays prepared.
	claimUID string
	spec     string
	gpu      string
}

func (e *releaseEnv) createPod(ns string, pod *v1.Pod) *v1.Pod {
	e.t.Helper()
	created, err := e.cp.Client.CoreV1().Pods(ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	return created
}

func (e *releaseEnv) waitRunning(ns, name string) *v1.Pod {
	e.t.Helper()
	var pod *v1.Pod
	e.poll("pod "+ns+"/"+name+" Running on the real node", func() (bool, error) {
		p, err := e.cp.Client.CoreV1().Pods(ns).Get(e.ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil, nil
	})
	return pod
}

// checkShare checks a running workload pod: its claim's device, what the
// probe saw, the limits the chart's hook set on its container's cgroup
// and its CDI spec; it returns what must survive an upgrade.
func (e *releaseEnv) checkShare(role string, pod *v1.Pod, softGiB, hardGiB int64) runningContainer {
	e.t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		e.t.Fatalf("pod %s has no generated claim: %+v", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := e.cp.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(e.ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	device := claim.Status.Allocation.Devices.Results[0].Device
	slices, err := e.cp.Client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		e.t.Fatal(err)
	}
	var uuid string
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if d.Name == device {
				uuid = *d.Attributes["uuid"].StringValue
			}
		}
	}
	var report *harness.ProbeReport
	e.poll("the probe's report of pod "+pod.Name, func() (bool, error) {
		r, ok, err := e.node.Probe(pod, "main")
		report = r
		return ok, err
	})
	if got := report.Env["NVIDIA_VISIBLE_DEVICES"]; got != uuid || uuid == "" {
		e.t.Errorf("pod %s sees NVIDIA_VISIBLE_DEVICES=%q, want its device %s's uuid %q", pod.Name, got, device, uuid)
	}
	if got, want := report.Env["NVIDIA_GPU_MEMORY_LIMIT"], fmt.Sprint(hardGiB*1024); got != want {
		e.t.Errorf("pod %s sees NVIDIA_GPU_MEMORY_LIMIT=%q, want %s", pod.Name, got, want)
	}
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	r, err := e.hookRecord(id)
	if err != nil {
		e.t.Fatalf("pod %s: %v", pod.Name, err)
	}
	if r.UUID != uuid || r.Soft != uint64(softGiB*gib) || r.Hard != uint64(hardGiB*gib) {
		e.t.Errorf("the hook set %+v for pod %s, want GPU %s soft %dGi hard %dGi", r, pod.Name, uuid, softGiB, hardGiB)
	}
	spec := e.specOf(string(claim.UID))
	if _, err := os.Stat(spec); err != nil {
		e.t.Errorf("the CDI spec of pod %s's claim: %v", pod.Name, err)
	}
	e.t.Logf("%s pod %s on node %s, container %s: GPU %s, the chart's hook set soft %d hard %d on cgroup %s",
		role, pod.Name, pod.Spec.NodeName, id, uuid, r.Soft, r.Hard, r.Cgroup)
	return runningContainer{role: role, namespace: pod.Namespace, pod: pod.Name, podUID: pod.UID, containerID: id,
		claimUID: string(claim.UID), spec: spec, gpu: uuid}
}

// runWorkload runs a pod with an SMSharing fraction claim (the plugin
// starts the GPU's MPS daemon Pod) and a pod with KAI's annotations (the
// controller's webhook gives it a claim).
func (e *releaseEnv) runWorkload() []runningContainer {
	e.t.Helper()
	ns := e.workload
	if _, err := e.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx,
		template("mps-20g", "sm-sharing.gpufrac.dev", "20Gi", "memoryLimit: 30Gi\n"), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	frac := probePod("fraction")
	frac.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("mps-20g")}}
	frac.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	e.createPod(ns, frac)

	kai := probePod("kai")
	kai.Annotations = map[string]string{
		"nvidia.com/container.main.gpu-memory.request": "10Gi",
		"nvidia.com/container.main.gpu-memory.limit":   "16Gi",
	}
	if created := e.createPod(ns, kai); len(created.Spec.ResourceClaims) != 1 {
		e.t.Fatalf("the controller's webhook did not translate the KAI pod: %+v", created.Spec.ResourceClaims)
	}
	out := []runningContainer{
		e.checkShare("fraction-claim", e.waitRunning(ns, "fraction"), 20, 30),
		e.checkShare("KAI-annotated", e.waitRunning(ns, "kai"), 10, 16),
	}
	var daemon v1.Pod
	e.poll("the MPS daemon Pod of GPU "+out[0].gpu, func() (bool, error) {
		list, err := e.cp.Client.CoreV1().Pods(releaseNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/gpu=" + out[0].gpu})
		if err != nil || len(list.Items) != 1 {
			return false, err
		}
		daemon = list.Items[0]
		return daemon.Status.Phase == v1.PodRunning && len(daemon.Status.ContainerStatuses) > 0 && daemon.Status.ContainerStatuses[0].State.Running != nil, nil
	})
	id := strings.TrimPrefix(daemon.Status.ContainerStatuses[0].ContainerID, "containerd://")
	e.t.Logf("MPS daemon Pod %s/%s on node %s, container %s", daemon.Namespace, daemon.Name, daemon.Spec.NodeName, id)
	return append(out, runningContainer{role: "MPS daemon", namespace: daemon.Namespace, pod: daemon.Name, podUID: daemon.UID, containerID: id})
}

// checkUntouched checks that each container still runs as the same
// container (ID, no restart) and each claim is still prepared.
func (e *releaseEnv) checkUntouched(when string, before []runningContainer) {
	e.t.Helper()
	for _, c := range before {
		pod, err := e.cp.Client.CoreV1().Pods(c.namespace).Get(e.ctx, c.pod, metav1.GetOptions{})
		if err != nil {
			e.t.Errorf("%s: %s pod %s: %v", when, c.role, c.pod, err)
			continue
		}
		st := pod.Status.ContainerStatuses[0]
		id := strings.TrimPrefix(st.ContainerID, "containerd://")
		if pod.UID != c.podUID || id != c.containerID || st.RestartCount != 0 || st.State.Running == nil {
			e.t.Errorf("%s: %s pod %s was disturbed: uid %s (was %s), container %s (was %s), restarts %d, state %+v",
				when, c.role, c.pod, pod.UID, c.podUID, id, c.containerID, st.RestartCount, st.State)
			continue
		}
		if c.spec != "" {
			if _, err := os.Stat(c.spec); err != nil {
				e.t.Errorf("%s: the claim of %s pod %s is no longer prepared: %v", when, c.role, c.pod, err)
			}
		}
		e.t.Logf("%s: %s pod %s still runs container %s", when, c.role, c.pod, id)
	}
}

// podUIDs are the UIDs of the release's plugin and controller pods.
func (e *releaseEnv) podUIDs() map[string]bool {
	out := map[string]bool{}
	for _, component := range []string{"kubelet-plugin", "controller"} {
		for _, p := range e.releasePods(component) {
			out[string(p.UID)] = true
		}
	}
	return out
}

// newPodPrepares runs one more pod with a TimeSlicing share after a
// revision change: the new plugin prepares, and its hook sets the limits;
// then deletes it again.
func (e *releaseEnv) newPodPrepares(name string) {
	e.t.Helper()
	ns := e.workload
	tmpl := template(name, "gpufrac.dev", "8Gi", "memoryLimit: 12Gi\n")
	if _, err := e.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	pod := probePod(name)
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(name)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	e.createPod(ns, pod)
	c := e.checkShare("new", e.waitRunning(ns, name), 8, 12)
	e.cp.DeletePod(e.ctx, e.t, releaseWait, ns, name)
	e.poll("the CDI spec of pod "+name+" to be removed by Unprepare", func() (bool, error) {
		_, err := os.Stat(c.spec)
		return os.IsNotExist(err), nil
	})
}

func (e *releaseEnv) upgradeTo(version string, before []runningContainer) {
	e.t.Helper()
	old := e.podUIDs()
	rel, err := e.helm.Upgrade(e.ctx, releaseName, e.values[version])
	if err != nil {
		e.t.Fatalf("helm upgrade to %s: %v", version, err)
	}
	e.t.Logf("release %s revision %d: %s", rel.Name, rel.Revision, rel.Status)
	e.checkRelease(version, old)
	e.checkUntouched("after the upgrade to "+version, before)
	e.newPodPrepares("after-upgrade")
}

func (e *releaseEnv) rollbackTo(revision int, version string, before []runningContainer) {
	e.t.Helper()
	old := e.podUIDs()
	rel, err := e.helm.Rollback(e.ctx, releaseName, revision)
	if err != nil {
		e.t.Fatalf("helm rollback to revision %d: %v", revision, err)
	}
	e.t.Logf("release %s revision %d: %s (%s)", rel.Name, rel.Revision, rel.Status, rel.Description)
	e.checkRelease(version, old)
	e.checkUntouched("after the rollback to "+version, before)
	e.newPodPrepares("after-rollback")
}

// statNotExist returns nil once path does not exist.
func statNotExist(path string) (bool, error) {
	_, err := os.Stat(path)
	if os.IsNotExist(err) {
		return true, nil
	}
	if err == nil {
		return false, os.ErrExist
	}
	return false, err
}
