// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	"github.com/gpufrac/gpufrac/internal/node/incident"
)

// showEviction runs NVIDIA's eviction on a free TimeSlicing GPU of the
// first real node, whose MPS daemon is the double: pod borrower (40Gi
// request, 100Gi limit) holds 90Gi; pod owner then allocates its 60Gi
// request, which does not fit beside it, so the daemon terminates the
// borrower. It prints what the plugin made of it: the MPSClientEvicted
// Events on the borrower's claim and pod, naming the GPU and the owner's
// claim, and the incident counter.
func (r *reporter) showEviction(ctx context.Context, metricsAddr map[string]string) error {
	step("A borrowing pod evicted: pod borrower (40Gi request, 100Gi limit) holds 90Gi of a 141Gi GPU; pod owner then needs its 60Gi request")
	if len(r.realNodes) == 0 {
		fmt.Println("    (needs the real node, where containers are MPS clients of the GPU's daemon: run as root on Linux)")
		return nil
	}
	n := r.realNodes[0] // the node with MPS daemons
	index, err := r.freeTimeSlicingGPU(ctx, n.Name)
	if err != nil {
		return err
	}
	class := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "demo-eviction"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == "gpufrac.dev" && device.attributes["gpufrac.dev"].index == %d`, index)}}}}}
	if _, err := r.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating DeviceClass demo-eviction: %w", err)
	}
	for name, spec := range map[string][2]string{"borrower": {"40Gi", "100Gi"}, "owner": {"60Gi", ""}} {
		if err := r.createTemplate(ctx, "demo-"+name, class.Name, spec[0], spec[1]); err != nil {
			return err
		}
	}
	fmt.Printf("    GPU %d of %s, TimeSlicing: both pods are MPS clients of its daemon through the main socket\n", index, n.Name)
	if err := r.createFakeCUDAPod(ctx, n.Name, "borrower", "alloc", "92160", "hold", "0"); err != nil {
		return err
	}
	if err := r.waitDaemonLog(ctx, n.PluginDataDir, "92160MiB ok"); err != nil {
		return fmt.Errorf("waiting for pod borrower's 90Gi: %w", err)
	}
	fmt.Println("    pod borrower holds 90Gi (50Gi above its request)")
	if err := r.createFakeCUDAPod(ctx, n.Name, "owner", "alloc", "61440"); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		b, errB := r.client.CoreV1().Pods(r.namespace).Get(ctx, "borrower", metav1.GetOptions{})
		o, errO := r.client.CoreV1().Pods(r.namespace).Get(ctx, "owner", metav1.GetOptions{})
		return errB == nil && errO == nil && b.Status.Phase == v1.PodFailed && o.Status.Phase == v1.PodSucceeded, nil
	}); err != nil {
		return fmt.Errorf("waiting for pod owner to succeed and pod borrower to be evicted: %w", err)
	}
	fmt.Println("    pod owner got its 60Gi and succeeded; pod borrower failed: its next CUDA call returned CUDA_ERROR_MPS_CLIENT_TERMINATED")
	return r.printIncidents(ctx, incident.MPSEvicted, metricsAddr[n.Name])
}

// freeTimeSlicingGPU is the highest index of a node's GPUs that serves
// TimeSlicing and holds no claim.
func (r *reporter) freeTimeSlicingGPU(ctx context.Context, node string) (int64, error) {
	slices, err := r.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing ResourceSlices: %w", err)
	}
	claims, err := r.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	used := map[string]bool{}
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			for _, res := range c.Status.Allocation.Devices.Results {
				used[res.Pool+"/"+res.Device] = true
			}
		}
	}
	best := int64(-1)
	for _, s := range slices.Items {
		if s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		for _, d := range s.Spec.Devices {
			modes, idx := d.Attributes[resourceslices.AttrComputeModes].StringValue, d.Attributes[resourceslices.AttrIndex].IntValue
			if modes == nil || idx == nil || !strings.Contains(*modes, "TimeSlicing") || used[s.Spec.Pool.Name+"/"+d.Name] {
				continue
			}
			best = max(best, *idx)
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("no free TimeSlicing GPU on %s for the eviction", node)
	}
	return best, nil
}

// createTemplate makes a TimeSlicing claim template of memory guaranteed,
// with limit as its memoryLimit unless empty.
func (r *reporter) createTemplate(ctx context.Context, name, class, memory, limit string) error {
	claim := resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}},
	}}}}
	config := map[string]string{"apiVersion": "gpufrac.dev/v1alpha1", "kind": "FractionConfig", "computeMode": "TimeSlicing"}
	if limit != "" {
		config["memoryLimit"] = limit
	}
	params, err := json.Marshal(config)
	if err != nil {
		return err
	}
	claim.Config = []resourceapi.DeviceClaimConfiguration{{Requests: []string{"gpu"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpufrac.dev", Parameters: runtime.RawExtension{Raw: params}}}}}
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: claim}}}
	if _, err := r.client.ResourceV1().ResourceClaimTemplates(r.namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ResourceClaimTemplate %s: %w", name, err)
	}
	return nil
}

// createFakeCUDAPod runs the node image's fake CUDA client once with args,
// with a claim from template demo-<name>.
func (r *reporter) createFakeCUDAPod(ctx context.Context, node, name string, args ...string) error {
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{
			NodeSelector:                  map[string]string{"kubernetes.io/hostname": node},
			RestartPolicy:                 v1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr.To(false),
			TerminationGracePeriodSeconds: ptr.To[int64](5),
			ResourceClaims:                []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("demo-" + name)}},
			Containers: []v1.Container{{
				Name: "main", Image: harness.NodeImage, ImagePullPolicy: v1.PullNever,
				Command:   append([]string{"/fakecuda", "-name", name}, args...),
				Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "gpu"}}},
			}},
		},
	}
	if _, err := r.client.CoreV1().Pods(r.namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", name, err)
	}
	return nil
}

// waitDaemonLog waits until one of the node's MPS daemons logged want.
func (r *reporter) waitDaemonLog(ctx context.Context, pluginDataDir, want string) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		logs, _ := filepath.Glob(filepath.Join(pluginDataDir, "mps", "*", "log", "control.log"))
		for _, l := range logs {
			if raw, err := os.ReadFile(l); err == nil && strings.Contains(string(raw), want) {
				return true, nil
			}
		}
		return false, nil
	})
}

// printIncidents waits for kind's Events on a claim and a pod, prints
// them and the plugin's counter of that kind.
func (r *reporter) printIncidents(ctx context.Context, kind incident.Kind, addr string) error {
	var notes []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := r.client.EventsV1().Events(r.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		notes = nil
		for _, ev := range list.Items {
			if ev.Reason == string(kind) {
				notes = append(notes, fmt.Sprintf("%s %s/%s %s: %s", ev.Type, ev.Regarding.Kind, ev.Regarding.Name, ev.Reason, ev.Note))
			}
		}
		return len(notes) >= 2, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the %s Events: %w", kind, err)
	}
	fmt.Println("    Events:")
	for _, n := range notes {
		fmt.Println("      " + n)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return fmt.Errorf("scraping the plugin's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	fmt.Println("    the plugin's counter:")
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "gpufrac_incidents_total{") && strings.Contains(line, `kind="`+string(kind)+`"`) {
			fmt.Println("      " + line)
		}
	}
	return nil
}
