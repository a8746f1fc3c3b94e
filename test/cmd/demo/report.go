package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/test/harness"
)

// reporter reads the demo's objects back from the API server (and the
// stand-ins' records) to show what happened.
type reporter struct {
	ctx       context.Context
	client    kubernetes.Interface
	nodes     []*harness.Node
	namespace string
}

// persistentFailures is how many failed prepare attempts, over at least
// persistentAfter, make the demo stop waiting for a pod: the kubelet would
// keep retrying, but a newcomer should not wait minutes for the same error.
const (
	persistentFailures = 5
	persistentAfter    = 10 * time.Second
)

// waitRunning waits until every pod in the namespace is Running. It returns
// a line per pod that is not, with the reason, when the timeout passes or
// when the remaining pods keep failing the same way.
func (r *reporter) waitRunning(timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(r.ctx, timeout)
	defer cancel()
	start := time.Now()
	seen := map[string]string{}
	for {
		pods, err := r.client.CoreV1().Pods(r.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing pods: %w", err)
		}
		var notRunning []string
		stuck := 0
		for i := range pods.Items {
			pod := &pods.Items[i]
			state, why, failing := r.podState(ctx, pod)
			if seen[pod.Name] != state {
				seen[pod.Name] = state
				fmt.Printf("    %6s  pod %-11s %s\n", time.Since(start).Round(100*time.Millisecond), pod.Name, state)
			}
			if state != "Running" {
				notRunning = append(notRunning, fmt.Sprintf("pod %s: %s", pod.Name, why))
				if failing {
					stuck++
				}
			}
		}
		if len(pods.Items) > 0 && len(notRunning) == 0 {
			return nil, nil
		}
		if len(notRunning) > 0 && stuck == len(notRunning) {
			return notRunning, fmt.Errorf("%d pod(s) keep failing and would stay out of Running", stuck)
		}
		select {
		case <-ctx.Done():
			return notRunning, fmt.Errorf("pods not Running after %s", timeout)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podState says where a pod is, why, and whether it keeps failing.
func (r *reporter) podState(ctx context.Context, pod *v1.Pod) (string, string, bool) {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return "Pending (unschedulable)", "not scheduled: " + c.Message, false
		}
	}
	if pod.Spec.NodeName == "" {
		return "Pending", "not scheduled yet", false
	}
	if pod.Status.Phase == v1.PodRunning {
		return "Running", "", false
	}
	events, err := r.client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(pod.UID)})
	if err != nil {
		events = &v1.EventList{}
	}
	var last *v1.Event
	for i := range events.Items {
		ev := &events.Items[i]
		if ev.Type == v1.EventTypeWarning && (last == nil || ev.LastTimestamp.After(last.LastTimestamp.Time)) {
			last = ev
		}
	}
	state := "scheduled on " + pod.Spec.NodeName
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			state = fmt.Sprintf("on %s, %s", pod.Spec.NodeName, w.Reason)
		}
	}
	if last == nil {
		return state, state, false
	}
	failing := last.Count >= persistentFailures && last.LastTimestamp.Sub(last.FirstTimestamp.Time) >= persistentAfter
	return state, fmt.Sprintf("%s: %s (%s, %d times)", state, last.Message, last.Reason, last.Count), failing
}

// claimName is the generated claim of a pod's named claim.
func (r *reporter) claimName(pod, podClaim string) (string, error) {
	p, err := r.client.CoreV1().Pods(r.namespace).Get(r.ctx, pod, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("getting pod %s: %w", pod, err)
	}
	for i := range p.Spec.ResourceClaims {
		if p.Spec.ResourceClaims[i].Name == podClaim {
			name, _, err := resourceclaim.Name(p, &p.Spec.ResourceClaims[i])
			if err != nil || name == nil {
				return "", fmt.Errorf("pod %s has no ResourceClaim for %s yet: %v", pod, podClaim, err)
			}
			return *name, nil
		}
	}
	return "", fmt.Errorf("pod %s has no claim %s", pod, podClaim)
}

type gpuRow struct {
	node, device, uuid, product string
	capacity                    resource.Quantity
	guaranteed, limit           resource.Quantity
	claims                      []string
	modes                       map[v1alpha1.ComputeMode]bool
}

// gpuTable prints one row per GPU: what the scheduler guaranteed on it (the
// consumed memory of each share), the limits the claims' configs set (class
// config, then claim config, later wins: what the plugin enforces), the
// claims and their compute modes.
func (r *reporter) gpuTable(w io.Writer) error {
	sliceList, err := r.client.ResourceV1().ResourceSlices().List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceSlices: %w", err)
	}
	rows := map[string]*gpuRow{}
	var keys []string
	for _, s := range sliceList.Items {
		for _, d := range s.Spec.Devices {
			key := s.Spec.Pool.Name + "/" + d.Name
			row := &gpuRow{node: s.Spec.Pool.Name, device: d.Name, capacity: d.Capacity["memory"].Value, modes: map[v1alpha1.ComputeMode]bool{}}
			if a := d.Attributes["uuid"]; a.StringValue != nil {
				row.uuid = *a.StringValue
			}
			if a := d.Attributes["productName"]; a.StringValue != nil {
				row.product = *a.StringValue
			}
			rows[key] = row
			keys = append(keys, key)
		}
	}
	claims, err := r.client.ResourceV1().ResourceClaims("").List(r.ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing ResourceClaims: %w", err)
	}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, res := range c.Status.Allocation.Devices.Results {
			row := rows[res.Pool+"/"+res.Device]
			if res.Driver != v1alpha1.DriverName || row == nil {
				continue
			}
			request := res.ConsumedCapacity["memory"]
			cfg, err := fractionConfig(c.Status.Allocation.Devices.Config, res)
			if err != nil {
				return fmt.Errorf("claim %s: %w", c.Name, err)
			}
			row.guaranteed.Add(request)
			row.limit.Add(v1alpha1.EffectiveLimit(cfg, request))
			row.modes[cfg.EffectiveComputeMode()] = true
			row.claims = append(row.claims, c.Name)
		}
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	_, _ = fmt.Fprintln(tw, "NODE\tGPU\tUUID\tGUARANTEED\tLIMITS\tMODE\tCLAIMS")
	idle := 0
	for _, key := range keys {
		row := rows[key]
		if len(row.claims) == 0 {
			idle++
			continue
		}
		modes := make([]string, 0, len(row.modes))
		for _, m := range slices.Sorted(maps.Keys(row.modes)) {
			modes = append(modes, string(m))
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s of %s\t%s\t%s\t%s\n", row.node, row.device, row.uuid,
			gib(row.guaranteed), gib(row.capacity), gib(row.limit), strings.Join(modes, ","), strings.Join(row.claims, ", "))
	}
	_ = tw.Flush()
	if len(keys) > 0 {
		_, _ = fmt.Fprintf(w, "\n%d other GPUs (%s, %s each) are free.\n", idle, rows[keys[0]].product, gib(rows[keys[0]].capacity))
	}
	_, _ = fmt.Fprintln(w, "GUARANTEED: memory the scheduler reserved (never over-committed); LIMITS: sum of the shares' hard ceilings, enforced on the node.")
	return nil
}

// fractionConfig merges the gpufrac configs that apply to one result, in
// the allocation's order (class configs, then claim configs).
func fractionConfig(configs []resourceapi.DeviceAllocationConfiguration, res resourceapi.DeviceRequestAllocationResult) (*v1alpha1.FractionConfig, error) {
	var cfgs []*v1alpha1.FractionConfig
	for i, c := range resourceclaim.ConfigForResult(configs, res) {
		if c.Opaque == nil || c.Opaque.Driver != v1alpha1.DriverName {
			continue
		}
		cfg, errs := v1alpha1.Decode(c.Opaque.Parameters.Raw, field.NewPath("status", "allocation", "devices", "config").Index(i))
		if len(errs) > 0 {
			return nil, errs.ToAggregate()
		}
		cfgs = append(cfgs, cfg)
	}
	merged := v1alpha1.Merge(cfgs...)
	merged.Default()
	return merged, nil
}

func gib(q resource.Quantity) string {
	return fmt.Sprintf("%.1fGi", float64(q.Value())/(1<<30))
}

// containers prints, for each Running pod, what CDI injection gave its
// containers.
func (r *reporter) containers(w io.Writer) {
	for _, n := range r.nodes {
		for _, rec := range n.StandIn.Pods() {
			for _, c := range rec.Containers {
				if len(c.CDIDevices) == 0 {
					continue // MPS daemons and other pods without claims
				}
				_, _ = fmt.Fprintf(w, "  %s/%s on %s (CDI devices %s)\n", rec.Name, c.Name, rec.Node, strings.Join(c.CDIDevices, ", "))
				for _, kv := range c.Env {
					if strings.HasPrefix(kv, "NVIDIA_") || strings.HasPrefix(kv, "CUDA_") {
						_, _ = fmt.Fprintf(w, "      env    %s\n", kv)
					}
				}
				var devs []string
				for _, d := range c.DeviceNodes {
					devs = append(devs, d.Path)
				}
				if len(devs) > 0 {
					_, _ = fmt.Fprintf(w, "      dev    %s\n", strings.Join(devs, " "))
				}
				for _, m := range c.Mounts {
					_, _ = fmt.Fprintf(w, "      mount  %s -> %s\n", m.Source, m.Destination)
				}
				if c.Hooks != nil {
					for _, h := range c.Hooks.CreateContainer {
						_, _ = fmt.Fprintf(w, "      hook   createContainer: %s\n", strings.Join(append([]string{h.Path}, h.Args...), " "))
					}
				}
			}
		}
		_, _ = fmt.Fprintf(w, "  (records: %s/*.json; CDI specs: %s)\n", n.RecordDir, n.CDIRoot)
	}
	daemons, err := r.client.CoreV1().Pods(harness.MPSNamespace).List(r.ctx, metav1.ListOptions{})
	if err != nil || len(daemons.Items) == 0 {
		return
	}
	_, _ = fmt.Fprintf(w, "  MPS control daemon Pods the plugins started for SMSharing claims (marked Running by the stand-in; no MPS server runs without a GPU):\n")
	for _, d := range daemons.Items {
		_, _ = fmt.Fprintf(w, "      %s/%s on %s for GPU %s\n", d.Namespace, d.Name, d.Spec.NodeName, d.Labels["gpufrac.dev/gpu"])
	}
}
