// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
)

const (
	nodeNameExtra = "authentication.kubernetes.io/node-name"
	pluginNode    = "rbac-n1"
	otherNode     = "rbac-n2"
	waitTimeout   = 90 * time.Second
)

// TestPluginWorksUnderTheChartsRBACAndPolicy installs the chart's RBAC and
// admission policy for real, runs gpufrac-kubelet-plugin as the chart's
// service account (impersonated with the node-name extra that a pod-bound
// token carries), and drives an SMSharing claim through Prepare (slices,
// claim status, MPS daemon Pod) and Unprepare. Then it checks what the same
// identity must not do: write another node's slices, act without a node
// association, touch Secrets or Pods outside its namespace.
func TestPluginWorksUnderTheChartsRBACAndPolicy(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	defer func() {
		if t.Failed() {
			var b strings.Builder
			cp.LogTails(&b, 30)
			t.Logf("component logs:\n%s", b.String())
		}
	}()
	vs := valueSet{name: "installed", release: "gpufrac", namespace: harness.MPSNamespace, values: map[string]any{
		// No controller serves in the harness: a fail-closed webhook would
		// refuse the SMSharing class and claims.
		"controller": map[string]any{"kaiTranslation": false, "configValidation": false},
		"mps":        map[string]any{"enabled": true},
	}}
	objs, _, err := render(loadChart(t), vs)
	if err != nil {
		t.Fatal(err)
	}
	ensureNamespace(ctx, t, vs.namespace)
	a := newApplier(t)
	for _, o := range objs {
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("installing: %v", err)
		}
	}
	sa := "system:serviceaccount:" + vs.namespace + ":gpufrac-kubelet-plugin"
	as := func(extra map[string][]string) (kubernetes.Interface, string) {
		return impersonate(t, sa, extra)
	}
	plugin, pluginKubeconfig := as(map[string][]string{nodeNameExtra: {pluginNode}})
	unbound, _ := as(map[string][]string{"authentication.kubernetes.io/credential-id": {"JTI=helm-test"}})

	// A policy takes effect a moment after it is created; until then the
	// other node's slice would be accepted.
	var denial error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, denial = plugin.ResourceV1().ResourceSlices().Create(ctx, slice("rbac-probe", otherNode), metav1.CreateOptions{})
		if denial == nil {
			return false, cp.Client.ResourceV1().ResourceSlices().Delete(ctx, "rbac-probe", metav1.DeleteOptions{})
		}
		return apierrors.IsInvalid(denial) || apierrors.IsForbidden(denial), nil
	})
	if err != nil || !strings.Contains(denial.Error(), "may write only gpufrac.dev ResourceSlices of its own node, not spec.nodeName="+otherNode) {
		t.Fatalf("the plugin of %s wrote a slice of %s: %v (last answer: %v)", pluginNode, otherNode, err, denial)
	}

	// The plugin itself, with the chart's identity: it publishes, prepares
	// an SMSharing claim (daemon Pod, claim status) and unprepares it.
	node, err := cp.AddNode(ctx, harness.NodeOptions{
		Name: pluginNode, GPUs: "h200x2", MPSImage: "mps:test",
		PluginArgs: []string{"--kubeconfig=" + pluginKubeconfig, "--sm-sharing-gpus=1"},
	})
	if err != nil {
		t.Fatalf("starting the plugin as %s: %v", sa, err)
	}
	defer func() { _ = node.Stop() }()
	ns := "rbac-workload"
	ensureNamespace(ctx, t, ns)
	tmpl := smSharingTemplate()
	if _, err := cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sm", Namespace: ns},
		Spec: v1.PodSpec{
			NodeSelector:   map[string]string{"kubernetes.io/hostname": pluginNode},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(tmpl.Name)}},
			Containers: []v1.Container{{
				Name: "app", Image: "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04",
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	if _, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var claim *resourceapi.ResourceClaim
	poll(ctx, t, "the pod Running with its claim's status written by the plugin", func() (bool, error) {
		p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || p.Status.Phase != v1.PodRunning || len(p.Status.ResourceClaimStatuses) == 0 {
			return false, err
		}
		claim, err = cp.Client.ResourceV1().ResourceClaims(ns).Get(ctx, ptr.Deref(p.Status.ResourceClaimStatuses[0].ResourceClaimName, ""), metav1.GetOptions{})
		return err == nil && len(claim.Status.Devices) == 1, err
	})
	if d := claim.Status.Devices[0]; d.Driver != "gpufrac.dev" || d.Pool != pluginNode {
		t.Errorf("status.devices[0] = %+v, want gpufrac.dev in pool %s", d, pluginNode)
	}
	daemons := func() int {
		pods, err := cp.Client.CoreV1().Pods(vs.namespace).List(ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/node=" + pluginNode})
		if err != nil {
			t.Fatal(err)
		}
		return len(pods.Items)
	}
	if n := daemons(); n != 1 {
		t.Errorf("%d MPS daemon Pods on %s, want 1", n, pluginNode)
	}
	if err := cp.Client.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(ctx, t, "the MPS daemon Pod deleted after Unprepare", func() (bool, error) { return daemons() == 0, nil })
	// Anything the plugin was refused but survived (a lost Event, a
	// status write given up) shows in its log.
	logText, err := os.ReadFile(node.PluginLog())
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(logText), "\n") {
		if strings.Contains(strings.ToLower(line), "forbidden") {
			t.Errorf("the plugin was refused something under the chart's RBAC:\n%s", line)
		}
	}

	// Events are written on claims in users' namespaces.
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "rbac-probe", Namespace: ns}, EventTime: metav1.NowMicro(),
		ReportingController: "gpufrac.dev/kubelet-plugin", ReportingInstance: pluginNode, Action: "Prepare", Reason: "PrepareFailed",
		Regarding: v1.ObjectReference{Kind: "ResourceClaim", Namespace: ns, Name: claim.Name, APIVersion: "resource.k8s.io/v1"}, Type: "Warning",
	}
	if _, err := plugin.EventsV1().Events(ns).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("recording an Event on a claim: %v", err)
	}

	// What the same identity must not do.
	if _, err := cp.Client.ResourceV1().ResourceSlices().Create(ctx, slice("rbac-other", otherNode), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = plugin.ResourceV1().ResourceSlices().Delete(ctx, "rbac-other", metav1.DeleteOptions{})
	wantRefused(t, "deleting another node's slice", err, "may not modify the ResourceSlice rbac-other of spec.nodeName="+otherNode)
	other, err := cp.Client.ResourceV1().ResourceSlices().Get(ctx, "rbac-other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other.Spec.Pool.Generation++
	_, err = plugin.ResourceV1().ResourceSlices().Update(ctx, other, metav1.UpdateOptions{})
	wantRefused(t, "updating another node's slice", err, "spec.nodeName="+otherNode)
	foreign := slice("rbac-foreign-driver", pluginNode)
	foreign.Spec.Driver = "gpu.nvidia.com"
	_, err = plugin.ResourceV1().ResourceSlices().Create(ctx, foreign, metav1.CreateOptions{})
	wantRefused(t, "writing another driver's slice on its own node", err, "spec.driver=gpu.nvidia.com")
	_, err = unbound.ResourceV1().ResourceSlices().Create(ctx, slice("rbac-unbound", pluginNode), metav1.CreateOptions{})
	wantRefused(t, "writing a slice without a node association", err, "no node association")
	_, err = plugin.CoreV1().Secrets(vs.namespace).List(ctx, metav1.ListOptions{})
	wantRefused(t, "listing Secrets", err, "forbidden")
	_, err = plugin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	wantRefused(t, "creating Pods outside its namespace", err, "forbidden")
	_, err = plugin.ResourceV1().ResourceClaims(ns).Update(ctx, claim, metav1.UpdateOptions{})
	wantRefused(t, "changing a claim's spec", err, "forbidden")
}

func wantRefused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want refused", what)
	} else if !strings.Contains(err.Error(), want) {
		t.Errorf("%s: refused for another reason: %v (want %q)", what, err, want)
	}
}

// impersonate returns a client and a kubeconfig file acting as user with
// the given extras, as the API server sees a pod's bound token.
func impersonate(t *testing.T, user string, extra map[string][]string) (kubernetes.Interface, string) {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate, ai.ImpersonateUserExtra = user, extra
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	rc, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return client, path
}

func slice(name, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: "gpufrac.dev", NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
		},
	}
}

func smSharingTemplate() *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "sm-10g"},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: "sm-sharing.gpufrac.dev", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}},
			}}},
			Config: []resourceapi.DeviceClaimConfiguration{{
				Requests: []string{"gpu"},
				DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
					Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: []byte(`{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig","memoryLimit":"20Gi"}`)},
				}},
			}},
		}}},
	}
}

func poll(ctx context.Context, t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) { return cond() }); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
