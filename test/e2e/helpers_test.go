// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

const (
	driver = "gpufrac.dev"
	// waitTimeout bounds each wait: a real pod start is about a second,
	// but the tests share two cores with the race detector's build.
	waitTimeout = 2 * time.Minute
	gib         = int64(1) << 30
)

// env is one test's namespace on the shared control plane and node.
type env struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	ns     string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, client: cp.Client}
	e.ns = cp.TestNamespace(ctx, t, "e2e-", 30, waitTimeout)
	t.Cleanup(e.cleanupPods)
	return e
}

// cleanupPods deletes the test's pods and waits until the real kubelet has
// stopped them (and unprepared their claims), so tests do not overlap on
// the node.
func (e *env) cleanupPods() {
	ctx := context.WithoutCancel(e.ctx)
	_ = e.client.CoreV1().Pods(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		pods, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
}

func (e *env) poll(what string, cond func() (bool, error)) {
	e.t.Helper()
	harness.Poll(e.ctx, e.t, waitTimeout, what, cond)
}

// classFor creates a DeviceClass of this namespace for the GPU of the given
// index, so tests keep to their own GPU of the shared node.
func (e *env) classFor(gpuIndex int) string {
	name := e.ns + "-gpu"
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].index == %d`, driver, driver, gpuIndex),
		}}}},
	}
	if _, err := e.client.ResourceV1().DeviceClasses().Create(e.ctx, class, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating DeviceClass %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		_ = e.client.ResourceV1().DeviceClasses().Delete(context.WithoutCancel(e.ctx), name, metav1.DeleteOptions{})
	})
	return name
}

// createTemplate creates a claim template of one GPU share: memory
// guaranteed, config as FractionConfig YAML (may be empty).
func (e *env) createTemplate(name, class, memory, config string) {
	e.t.Helper()
	spec := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}},
	}}}}
	if config != "" {
		params, err := yaml.YAMLToJSON([]byte("apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\n" + config))
		if err != nil {
			e.t.Fatalf("test config is not YAML: %v", err)
		}
		spec.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: params}}}}}
	}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}}}
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating ResourceClaimTemplate %s: %v", name, err)
	}
}

// probePod runs the probe of the node image on the real node; template, if
// set, gives its container a claim.
func probePod(name, template string) *v1.Pod {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node.Name},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []v1.Container{{
				Name: "main", Image: harness.NodeImage, ImagePullPolicy: v1.PullNever, Command: []string{"/probe"},
			}},
		},
	}
	if template != "" {
		pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}}
		pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
	}
	return pod
}

func (e *env) createPod(pod *v1.Pod) *v1.Pod {
	e.t.Helper()
	created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", pod.Name, err)
	}
	return created
}

// waitRunning waits until the pod's container runs on the real node, and
// fails with its state and events when it does not.
func (e *env) waitRunning(name string) *v1.Pod {
	e.t.Helper()
	var pod *v1.Pod
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, waitTimeout, true, func(ctx context.Context) (bool, error) {
		p, err := e.client.CoreV1().Pods(e.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		return p.Status.Phase == v1.PodRunning && len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil, nil
	})
	if err != nil {
		var events []string
		if list, lerr := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{}); lerr == nil {
			for _, ev := range list.Items {
				events = append(events, fmt.Sprintf("%s %s: %s", ev.InvolvedObject.Name, ev.Reason, ev.Message))
			}
		}
		e.t.Fatalf("pod %s not Running: %v; status %+v; events:\n%s", name, err, pod.Status, strings.Join(events, "\n"))
	}
	return pod
}

// probe waits for the probe's report in the container's log.
func (e *env) probe(pod *v1.Pod) *harness.ProbeReport {
	e.t.Helper()
	var report *harness.ProbeReport
	e.poll("the probe's report of pod "+pod.Name, func() (bool, error) {
		var ok bool
		var err error
		report, ok, err = node.Probe(pod, "main")
		return ok, err
	})
	e.t.Logf("pod %s saw: %s", pod.Name, report)
	return report
}

// gpu is the allocated device of the pod's only claim.
type gpu struct {
	UUID  string
	Minor int64
	Claim *resourceapi.ResourceClaim
}

func (e *env) gpuOf(pod *v1.Pod) gpu {
	e.t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		e.t.Fatalf("pod %s has no generated claim: %+v", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	results := claim.Status.Allocation.Devices.Results
	if len(results) != 1 {
		e.t.Fatalf("claim %s: %d results, want 1", claim.Name, len(results))
	}
	slices, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node.Name})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if d.Name == results[0].Device {
				return gpu{UUID: *d.Attributes["uuid"].StringValue, Minor: *d.Attributes["minor"].IntValue, Claim: claim}
			}
		}
	}
	e.t.Fatalf("device %s is in no slice of node %s", results[0].Device, node.Name)
	return gpu{}
}

// checkSees checks what a container with a share of g saw: the GPU's uuid,
// the memory variables (MiB) and its device node.
func (e *env) checkSees(s *harness.ProbeReport, g gpu, requestGiB, limitGiB int64) {
	e.t.Helper()
	want := map[string]string{
		"NVIDIA_VISIBLE_DEVICES":    g.UUID,
		"NVIDIA_GPU_MEMORY_REQUEST": fmt.Sprint(requestGiB * 1024),
		"NVIDIA_GPU_MEMORY_LIMIT":   fmt.Sprint(limitGiB * 1024),
		"GPUFRAC_CLAIM":             g.Claim.Namespace + "/" + g.Claim.Name,
	}
	for k, v := range want {
		if s.Env[k] != v {
			e.t.Errorf("container sees %s=%q, want %q", k, s.Env[k], v)
		}
	}
	dev := fmt.Sprintf("/dev/nvidia%d", g.Minor)
	if got := s.Devices[dev]; got != fmt.Sprintf("c 195:%d", g.Minor) {
		e.t.Errorf("container sees %s as %q, want c 195:%d (devices: %v)", dev, got, g.Minor, s.Devices)
	}
	if _, ok := s.Devices["/dev/nvidiactl"]; !ok {
		e.t.Errorf("container lacks /dev/nvidiactl: %v", s.Devices)
	}
}

// checkHook checks that gpufrac-cdi-hook ran for the container's real
// cgroup (which exists while the container runs) with these limits.
func (e *env) checkHook(pod *v1.Pod, g gpu, soft, hard int64) gpusim.LimitRecord {
	e.t.Helper()
	id := strings.TrimPrefix(pod.Status.ContainerStatuses[0].ContainerID, "containerd://")
	if id == "" {
		e.t.Fatalf("pod %s has no container ID", pod.Name)
	}
	all, err := node.LimitRecords()
	if err != nil {
		e.t.Fatal(err)
	}
	var found []gpusim.LimitRecord
	for _, r := range all {
		if strings.HasSuffix(r.Cgroup, id) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		e.t.Fatalf("hook records for container %s of pod %s: %+v, want one\nall records: %+v", id, pod.Name, found, all)
	}
	r := found[0]
	if r.UUID != g.UUID || r.Soft != uint64(soft) || r.Hard != uint64(hard) {
		e.t.Errorf("hook set %+v, want GPU %s soft %d hard %d", r, g.UUID, soft, hard)
	}
	if !strings.Contains(r.Cgroup, string(pod.UID)) && !strings.Contains(r.Cgroup, strings.ReplaceAll(string(pod.UID), "-", "_")) {
		e.t.Errorf("hook cgroup %s is not under pod %s's cgroup", r.Cgroup, pod.UID)
	}
	if _, err := os.Stat(r.Cgroup); err != nil {
		e.t.Errorf("the cgroup the hook was given is not the running container's: %v", err)
	}
	e.t.Logf("hook of pod %s: GPU %s soft %d hard %d on cgroup %s", pod.Name, r.UUID, r.Soft, r.Hard, r.Cgroup)
	return r
}

// specPath is the CDI spec file of a claim.
func specPath(claim *resourceapi.ResourceClaim) string {
	return node.CDIRoot + "/" + cdispec.SpecName(claim.UID)
}

func (e *env) deletePod(name string) {
	e.t.Helper()
	cp.DeletePod(e.ctx, e.t, waitTimeout, e.ns, name)
}

// checkContainerMetric scrapes the plugin's /metrics for the pod's
// container series: the hook recorded the container as containerd named
// it, and the plugin labels its usage with that pod and container.
func (e *env) checkContainerMetric(pod *v1.Pod, g gpu) {
	e.t.Helper()
	want := []string{`namespace="` + pod.Namespace + `"`, `pod="` + pod.Name + `"`,
		`container="` + pod.Spec.Containers[0].Name + `"`, `gpu_uuid="` + g.UUID + `"`}
	var found string
	e.poll("the plugin's per-container metric for pod "+pod.Name, func() (bool, error) {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return false, nil
		}
		defer func() { _ = resp.Body.Close() }()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if !strings.HasPrefix(line, "gpufrac_container_gpu_memory_used_bytes{") {
				continue
			}
			all := true
			for _, w := range want {
				all = all && strings.Contains(line, w)
			}
			if all {
				found = line
				return true, nil
			}
		}
		return false, nil
	})
	e.t.Logf("plugin metric: %s", found)
}
