// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/nodebuild"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
)

const (
	releaseName      = "gpufrac"
	releaseNamespace = "gpufrac-helm-e2e"
	nodeName         = "helm1"
	nodeGPUs         = "h200x4"
	// Two builds of this checkout that differ in their version string
	// (internal/buildinfo): the upgrade goes to the second, the rollback back.
	version1, version2 = "0.1.0-e2e.1", "0.1.0-e2e.2"
	// kubeletRegistry and hookDir are the chart's default host paths on
	// the real node.
	kubeletRegistry = "/var/lib/kubelet/plugins_registry"
	hookDir         = "/var/lib/gpufrac/bin"
	releaseWait     = 2 * time.Minute
	gib             = int64(1) << 30
)

// releaseEnv is the real node the chart is installed on, and what the test
// remembers across install, upgrade, rollback and uninstall.
type releaseEnv struct {
	t   *testing.T
	ctx context.Context
	// cp is the test's own control plane: the package's other tests apply
	// the chart's objects to theirs, whose cluster-scoped names (roles,
	// DeviceClasses) and DaemonSet a real node would meet.
	cp   *harness.ControlPlane
	node *harness.RealNode
	helm *harness.Helm
	// values of each build's release.
	values map[string]map[string]any
	// workload is the namespace of the pods that use the release.
	workload string
}

// TestHelmReleaseOnTheRealNode installs the chart with the Helm SDK on the
// harness's control plane with a real node (kubelet, containerd, runc) as
// its GPU node, from an image built from this checkout without Docker: the
// plugin runs as the chart's DaemonSet pod and registers with the real
// kubelet, the controller as its Deployment behind its webhook Service. A
// fraction-claim pod (SMSharing: with an MPS daemon Pod) and a KAI-annotated
// pod run with the limits the chart-installed hook set. `helm upgrade` to a
// build with another version string, then `helm rollback`, replace the
// plugin and controller pods; the workload containers and the MPS daemon
// keep their container IDs and the claims stay prepared. `helm uninstall`
// after the workloads are gone leaves no slice, DeviceClass, webhook or
// plugin socket.
func TestHelmReleaseOnTheRealNode(t *testing.T) {
	if err := harness.RealNodeSupport(); err != nil {
		skipOrFail(t, err.Error())
	}
	_, ctx := ktesting.NewTestContext(t)
	start := time.Now()
	rcp, err := harness.Start(ctx, harness.Options{Progress: os.Stderr, Workloads: true, PluginBinary: cp.PluginBinary})
	if err != nil {
		t.Fatalf("starting a control plane for workloads: %v", err)
	}
	t.Cleanup(func() {
		if err := rcp.Close(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	})
	node, err := rcp.AddRealNode(ctx, harness.RealNodeOptions{Name: nodeName, GPUs: nodeGPUs, ChartPlugin: true,
		// What NVIDIA's GPU feature discovery labels GPU nodes with: the
		// chart's default nodeSelector.
		Labels: map[string]string{"nvidia.com/gpu.present": "true"}})
	if err != nil {
		var unavailable *nodebuild.UnavailableError
		if errors.As(err, &unavailable) {
			skipOrFail(t, unavailable.Reason)
		}
		t.Fatalf("starting the real node: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			var b strings.Builder
			rcp.LogTails(&b, 40)
			t.Logf("component logs:\n%s", b.String())
		}
		if err := node.Stop(); err != nil {
			t.Errorf("stopping the real node: %v", err)
		}
	})
	t.Logf("real node %s ready in %s (adjusted for this machine: %v)", node.Name, time.Since(start).Round(100*time.Millisecond), node.Quirks)

	helm, err := rcp.NewHelm(ctx, releaseNamespace)
	if err != nil {
		t.Fatal(err)
	}
	e := &releaseEnv{t: t, ctx: ctx, cp: rcp, node: node, helm: helm, values: map[string]map[string]any{}}
	e.buildImages()
	e.step("install "+version1, func() { e.install() })
	e.step("workload", func() { e.workload = e.cp.TestNamespace(ctx, t, "helm-workload-", 30, releaseWait) })
	var before []runningContainer
	e.step("workload", func() { before = e.runWorkload() })
	e.step("upgrade to "+version2, func() { e.upgradeTo(version2, before) })
	var later []string
	e.step("a checkpoint in a later schema", func() { later = e.writeLaterSchema() })
	e.step("rollback to revision 1 ("+version1+")", func() { e.rollbackTo(1, version1, before) })
	e.step("the later schema survives the rollback", func() { e.checkLaterSchemaKept("after the rollback and a new pod's Prepare", later) })
	e.step("uninstall", func() { e.uninstall(before) })
	t.Logf("install, workload, upgrade, rollback and uninstall in %s", time.Since(start).Round(100*time.Millisecond))
}

func skipOrFail(t *testing.T, reason string) {
	t.Helper()
	if os.Getenv("GPUFRAC_E2E") == "required" {
		t.Fatalf("GPUFRAC_E2E=required, but the Helm release cannot run on a real node here: %s", reason)
	}
	t.Skipf("no real node here: %s", reason)
}

func (e *releaseEnv) step(name string, f func()) {
	e.t.Helper()
	start := time.Now()
	f()
	e.t.Logf("== %s: %s", name, time.Since(start).Round(100*time.Millisecond))
}

// buildImages builds the two images and imports them into the node's
// containerd; the release's pods never pull (pullPolicy Never).
func (e *releaseEnv) buildImages() {
	e.t.Helper()
	for _, version := range []string{version1, version2} {
		e.step("image "+version, func() {
			ref, size, err := e.cp.LoadChartImage(e.ctx, e.node, version)
			if err != nil {
				e.t.Fatalf("the chart's image %s: %v", version, err)
			}
			e.t.Logf("image %s built without Docker (%d MiB) and imported into the node's containerd", ref, size>>20)
		})
		values, err := e.cp.ChartValues(e.node, nodeGPUs, version)
		if err != nil {
			e.t.Fatal(err)
		}
		e.values[version] = values
	}
}

func (e *releaseEnv) install() {
	e.t.Helper()
	rel, err := e.helm.Install(e.ctx, releaseName, e.values[version1])
	if err != nil {
		e.t.Fatalf("helm install: %v", err)
	}
	e.t.Logf("release %s revision %d: %s", rel.Name, rel.Revision, rel.Status)
	e.checkRelease(version1, nil)

	// The hook the init container installed on the host, and the plugin's
	// registration with the real kubelet.
	if _, err := e.node.ReadFile(hookDir + "/gpufrac-cdi-hook"); err != nil {
		e.t.Errorf("the chart did not install gpufrac-cdi-hook on the host: %v", err)
	}
	e.poll("the plugin's registration socket in the kubelet's registry", func() (bool, error) {
		names, err := e.node.ReadDir(kubeletRegistry)
		return slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "gpufrac.dev") }), err
	})
	var slices_ []resourceapi.ResourceSlice
	e.poll("the plugin pod's ResourceSlices", func() (bool, error) {
		list, err := e.cp.Client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		if err != nil {
			return false, err
		}
		slices_ = list.Items
		return len(list.Items) > 0, nil
	})
	devices := 0
	for _, s := range slices_ {
		devices += len(s.Spec.Devices)
	}
	e.t.Logf("the plugin pod published %d ResourceSlices with %d devices for node %s", len(slices_), devices, nodeName)

	// The API server reaches the controller's validating webhook through
	// its Service: a template with a bad gpufrac config is refused by it.
	ns := e.mustNamespace("helm-webhook-")
	bad := template("bad", "gpufrac.dev", "10Gi", "computeMode: Sometimes\n")
	_, err = e.cp.Client.ResourceV1().ResourceClaimTemplates(ns).Create(e.ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), `admission webhook "templates.gpufrac.dev" denied the request`) {
		e.t.Errorf("a template with computeMode Sometimes: got %v, want the controller's webhook to refuse it", err)
	} else {
		e.t.Logf("the API server called the controller through its Service: %v", err)
	}
}

func (e *releaseEnv) mustNamespace(prefix string) string {
	return e.cp.TestNamespace(e.ctx, e.t, prefix, 30, releaseWait)
}

func (e *releaseEnv) poll(what string, cond func() (bool, error)) {
	e.t.Helper()
	harness.Poll(e.ctx, e.t, releaseWait, what, cond)
}

// releasePods lists the release's pods of a component (kubelet-plugin or
// controller) that are not being deleted.
func (e *releaseEnv) releasePods(component string) []v1.Pod {
	e.t.Helper()
	list, err := e.cp.Client.CoreV1().Pods(releaseNamespace).List(e.ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component=" + component})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []v1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// checkRelease checks that the plugin and controller pods run on the real
// node from the image of version and say so in their first log lines, and
// that none of them is one of the pods in old (a previous revision's).
// It returns the plugin pod.
func (e *releaseEnv) checkRelease(version string, old map[string]bool) v1.Pod {
	e.t.Helper()
	image := harness.ChartImageRepository + ":" + version
	var plugin v1.Pod
	for _, component := range []string{"kubelet-plugin", "controller"} {
		container := map[string]string{"kubelet-plugin": "kubelet-plugin", "controller": "controller"}[component]
		want := map[string]int{"kubelet-plugin": 1, "controller": 2}[component]
		var pods []v1.Pod
		e.poll(fmt.Sprintf("%d %s pod(s) of %s, Running", want, component, version), func() (bool, error) {
			pods = e.releasePods(component)
			if len(pods) != want {
				return false, nil
			}
			for _, p := range pods {
				if p.Status.Phase != v1.PodRunning || p.Spec.Containers[0].Image != image || old[string(p.UID)] {
					return false, nil
				}
			}
			return true, nil
		})
		for _, p := range pods {
			if p.Spec.NodeName != nodeName {
				e.t.Errorf("%s pod %s runs on %q, want the real node %s", component, p.Name, p.Spec.NodeName, nodeName)
			}
			var logLine string
			e.poll("the version line of "+p.Name, func() (bool, error) {
				out, err := e.node.ContainerLog(&p, container)
				if err != nil {
					return false, nil
				}
				for _, line := range strings.Split(out, "\n") {
					if strings.Contains(line, `"Starting gpufrac-`) {
						logLine = line
						return strings.Contains(line, `version="`+version+`"`), nil
					}
				}
				return false, nil
			})
			e.t.Logf("%s pod %s (uid %s, pod IP %s) on node %s runs %s: %s", component, p.Name, p.UID, p.Status.PodIP, p.Spec.NodeName, image, strings.TrimSpace(logLine))
			if component == "kubelet-plugin" {
				plugin = p
			}
		}
	}
	return plugin
}

// template is a claim template of one share of memory of a GPU of class;
// config is FractionConfig YAML (may be empty).
func template(name, class, memory, config string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}},
	}}
	spec := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}
	if config != "" {
		params := "{\"apiVersion\":\"gpufrac.dev/v1alpha1\",\"kind\":\"FractionConfig\"," + yamlToJSONFields(config) + "}"
		spec.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"},
			DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: []byte(params)}}}}}
	}
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: spec}}}
}

// yamlToJSONFields turns "key: value" lines (string values) into JSON
// fields.
func yamlToJSONFields(config string) string {
	var fields []string
	for _, line := range strings.Split(strings.TrimSpace(config), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fields = append(fields, fmt.Sprintf("%q:%q", strings.TrimSpace(k), strings.TrimSpace(v)))
	}
	return strings.Join(fields, ",")
}

// probePod runs the node image's probe on the real node.
func probePod(name string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": nodeName},
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			Containers: []v1.Container{{
				Name: "main", Image: harness.NodeImage, ImagePullPolicy: v1.PullNever, Command: []string{"/probe"},
			}},
		},
	}
}

// apiErrIgnoringNotFound is err unless the object is simply gone.
func apiErrIgnoringNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// specOf is the CDI spec file of a claim on the node (a host path: the
// chart's cdiRoot is containerd's spec directory).
func (e *releaseEnv) specOf(claimUID string) string {
	return filepath.Join(e.node.CDIRoot, cdispec.SpecName(typesUID(claimUID)))
}

// hookRecord is the one limit record of a container.
func (e *releaseEnv) hookRecord(containerID string) (gpusim.LimitRecord, error) {
	all, err := e.node.LimitRecords()
	if err != nil {
		return gpusim.LimitRecord{}, err
	}
	var found []gpusim.LimitRecord
	for _, r := range all {
		if strings.HasSuffix(r.Cgroup, containerID) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		return gpusim.LimitRecord{}, fmt.Errorf("hook records for container %s: %+v, want one (all: %+v)", containerID, found, all)
	}
	return found[0], nil
}
