// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

const (
	driver = "gpufrac.dev"
	// waitTimeout bounds each wait for the control plane: generous, as the
	// tests share two cores with the race detector.
	waitTimeout = 90 * time.Second
)

// env is one test's slice of the shared control plane: its own namespace
// and its own simulated nodes.
type env struct {
	t      *testing.T
	ctx    context.Context
	client kubernetes.Interface
	ns     string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	e := &env{t: t, ctx: ctx, client: cp.Client}
	e.ns = cp.TestNamespace(ctx, t, "gf-", 25, waitTimeout)
	t.Cleanup(func() { e.cleanupPods() })
	return e
}

// cleanupPods removes what is left so that the shared scheduler stops
// trying to place this test's pods.
func (e *env) cleanupPods() {
	ctx := context.WithoutCancel(e.ctx)
	_ = e.client.CoreV1().Pods(e.ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
}

// node adds a simulated node with a unique name, stopped at the test's end.
func (e *env) node(gpus string) *harness.Node {
	e.t.Helper()
	return e.nodeWith(harness.NodeOptions{GPUs: gpus})
}

func (e *env) nodeWith(opts harness.NodeOptions) *harness.Node {
	e.t.Helper()
	name := "n" + rand.String(6)
	opts.Name = name
	n, err := cp.AddNode(e.ctx, opts)
	if err != nil {
		e.t.Fatalf("adding simulated node %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			e.t.Errorf("stopping node %s: %v", name, err)
		}
	})
	return n
}

// deviceClass creates a cluster-scoped DeviceClass, removed at the end.
func (e *env) deviceClass(name, expression string) {
	e.t.Helper()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: expression},
		}}},
	}
	if _, err := e.client.ResourceV1().DeviceClasses().Create(e.ctx, class, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating DeviceClass %s: %v", name, err)
	}
	e.t.Cleanup(func() {
		_ = e.client.ResourceV1().DeviceClasses().Delete(context.WithoutCancel(e.ctx), name, metav1.DeleteOptions{})
	})
}

// classFor creates a DeviceClass for gpufrac devices named after the
// namespace, so parallel tests never share one.
func (e *env) classFor(suffix, extra string) string {
	name := e.ns + "-" + suffix
	expr := `device.driver == "gpufrac.dev"`
	if extra != "" {
		expr += " && " + extra
	}
	e.deviceClass(name, expr)
	return name
}

// claimTemplate is a template of one request "gpu" for count devices of
// class with a memory request; config, when not empty, is FractionConfig
// parameters as YAML.
func claimTemplate(name, class, memory string, count int64, config string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}},
	}}
	spec := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}
	if count > 1 {
		spec.Constraints = []resourceapi.DeviceConstraint{{DistinctAttribute: ptr.To(resourceapi.FullyQualifiedName("gpufrac.dev/uuid"))}}
	}
	if config != "" {
		params, err := yaml.YAMLToJSON([]byte(config))
		if err != nil {
			panic(fmt.Sprintf("test config is not YAML: %v", err))
		}
		spec.Config = []resourceapi.DeviceClaimConfiguration{{
			Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
				Driver: driver, Parameters: runtime.RawExtension{Raw: params},
			}},
		}}
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}},
	}
}

func (e *env) createTemplate(tmpl *resourceapi.ResourceClaimTemplate) {
	e.t.Helper()
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Create(e.ctx, tmpl, metav1.CreateOptions{}); err != nil {
		e.t.Fatalf("creating ResourceClaimTemplate %s: %v", tmpl.Name, err)
	}
}

// createPod creates a pod with one container using one claim from template,
// pinned to node by its hostname label so that parallel tests' nodes do not
// mix.
func (e *env) createPod(name, template, node string) *v1.Pod {
	e.t.Helper()
	return e.createPodFor(name, node, v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
}

// createPodFor creates the pod createPod does with its claim "gpu" given.
func (e *env) createPodFor(name, node string, claim v1.PodResourceClaim) *v1.Pod {
	e.t.Helper()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: v1.PodSpec{
			NodeSelector:   map[string]string{"kubernetes.io/hostname": node},
			ResourceClaims: []v1.PodResourceClaim{claim},
			Containers: []v1.Container{{
				Name: "app", Image: "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04", Command: []string{"sleep", "infinity"},
				Env:       []v1.EnvVar{{Name: "APP", Value: name}},
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating pod %s: %v", name, err)
	}
	return created
}

func (e *env) poll(what string, cond func() (bool, error)) {
	e.t.Helper()
	harness.Poll(e.ctx, e.t, waitTimeout, what, cond)
}

func (e *env) pods() []v1.Pod {
	e.t.Helper()
	list, err := e.client.CoreV1().Pods(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatalf("listing pods: %v", err)
	}
	return list.Items
}

func (e *env) pod(name string) *v1.Pod {
	e.t.Helper()
	pod, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("getting pod %s: %v", name, err)
	}
	return pod
}

// claimOf returns the claim generated for the pod's claim "gpu".
func (e *env) claimOf(pod *v1.Pod) *resourceapi.ResourceClaim {
	e.t.Helper()
	var claim *resourceapi.ResourceClaim
	e.poll("the ResourceClaim of pod "+pod.Name, func() (bool, error) {
		p, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[0])
		if err != nil || name == nil {
			return false, err
		}
		claim, err = e.client.ResourceV1().ResourceClaims(e.ns).Get(e.ctx, *name, metav1.GetOptions{})
		return err == nil, err
	})
	return claim
}

// unschedulable returns the scheduler's message when the pod is Pending
// because it cannot be scheduled.
func unschedulable(pod *v1.Pod) (string, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

func running(pod *v1.Pod) bool {
	return pod.Status.Phase == v1.PodRunning && slices.ContainsFunc(pod.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.PodReady && c.Status == v1.ConditionTrue
	})
}

// waitRunning waits for the pod to be Running, reporting why it is not
// (scheduler message, container waiting message) when it times out.
func (e *env) waitRunning(name string) *v1.Pod {
	e.t.Helper()
	var pod *v1.Pod
	e.poll("pod "+name+" to be Running", func() (bool, error) {
		var err error
		if pod, err = e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{}); err != nil {
			return false, err
		}
		if running(pod) {
			return true, nil
		}
		return false, fmt.Errorf("pod %s: %s", name, whyNotRunning(pod))
	})
	return pod
}

func whyNotRunning(pod *v1.Pod) string {
	if msg, ok := unschedulable(pod); ok {
		return "unschedulable: " + msg
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			return fmt.Sprintf("container %s waiting: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return fmt.Sprintf("phase %q, node %q", pod.Status.Phase, pod.Spec.NodeName)
}

// events returns the pod's events with the reason.
func (e *env) events(pod, reason string) []v1.Event {
	list, err := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod + ",reason=" + reason})
	if err != nil {
		return nil
	}
	return list.Items
}

// deletePod deletes as a user does (with the default grace period): the API
// server only marks the pod, and the node's stand-in unprepares its claims
// and removes it.
func (e *env) deletePod(name string) {
	e.t.Helper()
	cp.DeletePod(e.ctx, e.t, waitTimeout, e.ns, name)
}

// slices returns the ResourceSlices of a node from the API server.
func (e *env) slices(node string) []resourceapi.ResourceSlice {
	e.t.Helper()
	list, err := e.client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		e.t.Fatalf("listing ResourceSlices: %v", err)
	}
	return list.Items
}

// device finds a device of the node's slices by name.
func (e *env) device(node, name string) resourceapi.Device {
	e.t.Helper()
	for _, s := range e.slices(node) {
		for _, d := range s.Spec.Devices {
			if d.Name == name {
				return d
			}
		}
	}
	e.t.Fatalf("node %s has no device %s", node, name)
	return resourceapi.Device{}
}

func stringAttr(d resourceapi.Device, name string) string {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func intAttr(d resourceapi.Device, name string) int64 {
	if a, ok := d.Attributes[resourceapi.QualifiedName(name)]; ok && a.IntValue != nil {
		return *a.IntValue
	}
	return -1
}

// printSlices runs the plugin binary with --print-slices: what the plugin
// means to publish, without an API server in between.
func printSlices(t *testing.T, node, gpus string) []resourceapi.ResourceSlice {
	t.Helper()
	// With the MPS flags simulated nodes get (harness.NodeOptions): a
	// plugin without MPS daemons publishes mpsVersion none.
	cmd := exec.Command(cp.PluginBinary, "--node-name="+node, "--simulate-gpus="+gpus, "--print-slices",
		"--mps-daemon-image="+harness.DefaultMPSImage, "--namespace="+harness.MPSNamespace, "--driver-root="+driverRootWithMPS(t))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpufrac-kubelet-plugin --print-slices: %v\n%s", err, stderr.String())
	}
	var result []resourceapi.ResourceSlice
	for doc, err := range yamldocs.All(out) {
		if err != nil {
			t.Fatalf("parsing --print-slices output: %v", err)
		}
		if yamldocs.Blank(doc) {
			continue
		}
		var s resourceapi.ResourceSlice
		if err := yaml.UnmarshalStrict(doc, &s); err != nil {
			t.Fatalf("parsing --print-slices output: %v", err)
		}
		result = append(result, s)
	}
	return result
}

// driverRootWithMPS is a driver root holding an executable
// usr/bin/nvidia-cuda-mps-control: --print-slices only looks for it (the
// slices say a node can run MPS daemons where its driver root has the
// binary); no daemon runs from it.
func driverRootWithMPS(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	bin := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "nvidia-cuda-mps-control"), []byte("#!/bin/false\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}
