// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// SliceNodeOptions describe nodes that exist for the scheduler only: a
// Ready Node object and the ResourceSlices gpufrac-kubelet-plugin
// --simulate-gpus would publish, with no plugin and no kubelet. Pods bound
// there are never prepared; scheduling benchmarks and placement tests need
// nothing more, and a thousand of them cost the API server only objects.
type SliceNodeOptions struct {
	Names []string
	// Slices makes a node's ResourceSlices; simulate.NodeSlices makes
	// the plugin's (kept out of the harness, whose module users, such as
	// test/helm, then need not build the allocator).
	Slices func(ctx context.Context, node string) ([]*resourceapi.ResourceSlice, error)
	Labels map[string]string
	Taints []v1.Taint
	// Workers create nodes in parallel; default 8.
	Workers int
}

// AddSliceNodes creates the nodes and their slices.
func (cp *ControlPlane) AddSliceNodes(ctx context.Context, opts SliceNodeOptions) error {
	workers := opts.Workers
	if workers <= 0 {
		workers = 8
	}
	names := make(chan string)
	errs := make(chan error, len(opts.Names))
	var wg sync.WaitGroup
	for range min(workers, len(opts.Names)) {
		wg.Go(func() {
			for name := range names {
				errs <- cp.addSliceNode(ctx, name, opts)
			}
		})
	}
	for _, n := range opts.Names {
		names <- n
	}
	close(names)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

func (cp *ControlPlane) addSliceNode(ctx context.Context, name string, opts SliceNodeOptions) error {
	if err := cp.createNode(ctx, NodeOptions{Name: name, Labels: opts.Labels}); err != nil {
		return err
	}
	if len(opts.Taints) > 0 {
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			node.Spec.Taints = append(node.Spec.Taints, opts.Taints...)
			_, err = cp.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			return fmt.Errorf("tainting Node %s: %w", name, err)
		}
	}
	slices, err := opts.Slices(ctx, name)
	if err != nil {
		return err
	}
	for _, s := range slices {
		if _, err := cp.Client.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceSlice %s: %w", s.Name, err)
		}
	}
	return nil
}

// RemoveSliceNodes deletes the nodes and their slices.
func (cp *ControlPlane) RemoveSliceNodes(ctx context.Context, names []string) error {
	var all []error
	for _, name := range names {
		err := cp.Client.ResourceV1().ResourceSlices().DeleteCollection(ctx, metav1.DeleteOptions{},
			metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
		if err != nil && !apierrors.IsNotFound(err) {
			all = append(all, err)
		}
		if err := cp.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// Controller is gpufrac-controller (internal/controller, in this process)
// serving admission for the control plane.
type Controller struct {
	cancel func()
	done   chan error
	once   sync.Once
	err    error
	// config names the webhook configuration, the policy and its binding.
	config string
	cp     *ControlPlane
}

// Stop ends the controller and leaves its webhook configuration and
// policy in place, as a controller outage does: the API server keeps
// calling a webhook that no longer answers, and applying the policy with
// the last parameter the controller wrote.
func (c *Controller) Stop() error {
	c.once.Do(func() {
		c.cancel()
		c.err = <-c.done
	})
	return c.err
}

// Close stops the controller and removes its webhook configuration, its
// policy and the policy's binding.
func (c *Controller) Close() error {
	err := c.Stop()
	ctx := context.Background()
	ar := c.cp.Client.AdmissionregistrationV1()
	errs := []error{err,
		ar.MutatingWebhookConfigurations().Delete(ctx, c.config, metav1.DeleteOptions{}),
		ar.MutatingAdmissionPolicyBindings().Delete(ctx, c.config, metav1.DeleteOptions{}),
		ar.MutatingAdmissionPolicies().Delete(ctx, c.config, metav1.DeleteOptions{}),
	}
	for i, e := range errs {
		if apierrors.IsNotFound(e) {
			errs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// PackingWebhookName is the packing webhook's name in the chart.
const PackingWebhookName = "packing.pods.gpufrac.dev"

// PackingPolicyName is the name StartPacking gives the packing policy, its
// binding and the webhook configuration for namespace.
func PackingPolicyName(namespace string) string {
	return namespace + "-gpufrac-packing"
}

// PackingOptions say how StartPacking registers the mechanism.
type PackingOptions struct {
	// NoPolicy registers the packing webhook alone, as a chart with
	// controller.packing.admissionPolicy=false does (a cluster before
	// Kubernetes 1.36, which has no MutatingAdmissionPolicy).
	NoPolicy bool
	// PolicyTemplate, when set, names a ResourceClaimTemplate of the
	// namespace that asks for a fraction: StartPacking then also waits
	// until the API server packs its pods through the policy, without the
	// webhook.
	PolicyTemplate string
}

// StartPacking runs gpufrac-controller and registers the packing
// mechanism exactly as the chart does (the packing.pods.gpufrac.dev entry,
// the gpufrac-packing MutatingAdmissionPolicy and its binding of
// deployments/webhooks.yaml, which test/helm checks against the chart),
// but with the webhook reached by URL on loopback instead of through a
// Service, and the policy's parameter kept in namespace. It returns once
// the API server calls the webhook for pods of namespace (and, with
// PolicyTemplate, applies the policy).
func (cp *ControlPlane) StartPacking(ctx context.Context, namespace string, opts ...PackingOptions) (_ *Controller, finalErr error) {
	var o PackingOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ref, err := readPackingReference()
	if err != nil {
		return nil, err
	}
	dir, certPEM, err := loopbackCertDir(cp.Dir, "packing-")
	if err != nil {
		return nil, err
	}
	client, err := cp.controllerClient()
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ready := make(chan string, 1)
	c := &Controller{cancel: cancel, done: make(chan error, 1), config: PackingPolicyName(namespace), cp: cp}
	cfg := controller.Config{
		Client: client, WebhookAddress: "127.0.0.1:0", CertDir: dir, PackingLabels: true,
		Ready: func(addr string) { ready <- addr },
	}
	if !o.NoPolicy {
		cfg.PackingParameter = types.NamespacedName{Namespace: namespace, Name: ref.binding.Spec.ParamRef.Name}
	}
	go func() { c.done <- controller.Run(runCtx, cfg) }()
	defer func() {
		if finalErr != nil {
			_ = c.Close()
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-c.done:
		c.done <- err
		return nil, fmt.Errorf("gpufrac-controller stopped: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	hook := ref.webhook
	hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + admission.PathPackPods), CABundle: certPEM}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: c.config},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{*hook},
	}
	ar := cp.Client.AdmissionregistrationV1()
	if _, err := ar.MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registering the packing webhook: %w", err)
	}
	if !o.NoPolicy {
		policy, binding := ref.policy, ref.binding
		policy.ObjectMeta = metav1.ObjectMeta{Name: c.config}
		binding.ObjectMeta = metav1.ObjectMeta{Name: c.config}
		binding.Spec.PolicyName = c.config
		binding.Spec.ParamRef.Namespace = namespace
		if _, err := ar.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("registering the packing policy: %w", err)
		}
		if _, err := ar.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("binding the packing policy: %w", err)
		}
	}
	// The API server picks configurations up asynchronously.
	if err := cp.waitPacking(ctx, namespace, kaiProbe(), true, hook.Name); err != nil {
		return nil, fmt.Errorf("waiting for the API server to call the packing webhook: %w", err)
	}
	if !o.NoPolicy && o.PolicyTemplate != "" {
		if err := cp.waitPacking(ctx, namespace, templateProbe(o.PolicyTemplate), true, hook.Name); err != nil {
			return nil, fmt.Errorf("waiting for the API server to apply the packing policy: %w", err)
		}
	}
	return c, nil
}

// WaitPackingGone returns once the API server no longer packs pods of
// namespace (after Controller.Close, which removes the webhook
// configuration and the policy: the API server drops them a little later):
// neither a KAI-translated probe (the webhook's) nor, when template is set,
// a probe naming it (the policy's).
func (cp *ControlPlane) WaitPackingGone(ctx context.Context, namespace, template string) error {
	probes := []*v1.Pod{kaiProbe()}
	if template != "" {
		probes = append(probes, templateProbe(template))
	}
	for _, p := range probes {
		if err := cp.waitPacking(ctx, namespace, p, false, ""); err != nil {
			return fmt.Errorf("waiting for the API server to drop the packing webhook and policy: %w", err)
		}
	}
	return nil
}

// kaiProbe is a pod only the webhook packs: the policy leaves KAI pods to it.
func kaiProbe() *v1.Pod {
	p := templateProbe("probe")
	p.Annotations = map[string]string{kai.AnnotationTranslated: "probe"}
	return p
}

// templateProbe is a pod that names template.
func templateProbe(template string) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-packing-probe"},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)}},
			Containers:     []v1.Container{{Name: "main", Image: "busybox"}},
		},
	}
}

// waitPacking waits until a dry run of probe in namespace comes back
// labelled as a fraction pod (packed) or not. With webhook set and packed,
// it also asks that the webhook's call count (kube-apiserver's
// apiserver_admission_webhook_request_total) rise for the KAI probe and
// stay for any other: the policy, not the webhook, packed that one.
func (cp *ControlPlane) waitPacking(ctx context.Context, namespace string, probe *v1.Pod, packed bool, webhook string) error {
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var before float64
		if webhook != "" {
			c, err := cp.WebhookCalls(ctx, webhook)
			if err != nil {
				return false, err
			}
			before = c
		}
		got, err := cp.Client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil || (got.Labels[podterms.LabelFraction] == "true") != packed {
			return false, nil
		}
		if webhook == "" {
			return true, nil
		}
		after, err := cp.WebhookCalls(ctx, webhook)
		if err != nil {
			return false, err
		}
		_, kaiPod := probe.Annotations[kai.AnnotationTranslated]
		return (after > before) == kaiPod, nil
	})
}

// packingReference is the packing mechanism of deployments/webhooks.yaml.
type packingReference struct {
	webhook *admissionregistrationv1.MutatingWebhook
	policy  *admissionregistrationv1.MutatingAdmissionPolicy
	binding *admissionregistrationv1.MutatingAdmissionPolicyBinding
}

// readPackingReference reads the packing webhook, policy and binding from
// the reference admission configuration.
func readPackingReference() (*packingReference, error) {
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "deployments", "webhooks.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	ref := &packingReference{}
	for doc, err := range yamldocs.All(data) {
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		switch meta.Kind {
		case "MutatingWebhookConfiguration":
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			if err := yaml.UnmarshalStrict(doc, &mwc); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			for _, h := range mwc.Webhooks {
				if strings.HasPrefix(h.Name, "packing.") {
					ref.webhook = &h
				}
			}
		case "MutatingAdmissionPolicy":
			ref.policy = &admissionregistrationv1.MutatingAdmissionPolicy{}
			if err := yaml.UnmarshalStrict(doc, ref.policy); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		case "MutatingAdmissionPolicyBinding":
			ref.binding = &admissionregistrationv1.MutatingAdmissionPolicyBinding{}
			if err := yaml.UnmarshalStrict(doc, ref.binding); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
		}
	}
	if ref.webhook == nil || ref.policy == nil || ref.binding == nil || ref.binding.Spec.ParamRef == nil {
		return nil, fmt.Errorf("%s lacks the packing webhook, the packing policy or its binding's paramRef", path)
	}
	return ref, nil
}

// Placement is how a namespace's pods sit on GPUs: what the scheduler
// decided, read back from the pods and their claims' allocations.
type Placement struct {
	Pods, Bound int
	// GPUs is how many distinct GPUs hold at least one claim.
	GPUs int
	// LowerBound is the fewest GPUs that could hold the memory the bound
	// pods' claims consumed: ceil(consumed / GPU memory), over GPUs of one
	// size.
	LowerBound int
	// Consumed is the memory the allocations reserved, in bytes.
	Consumed int64
	// Nodes is how many distinct nodes hold bound pods.
	Nodes int
}

// PlacementOf reads the placement of namespace's pods.
func (cp *ControlPlane) PlacementOf(ctx context.Context, namespace string) (*Placement, error) {
	pods, err := cp.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	p := &Placement{Pods: len(pods.Items)}
	nodes := map[string]bool{}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName != "" {
			p.Bound++
			nodes[pod.Spec.NodeName] = true
		}
	}
	p.Nodes = len(nodes)
	claims, err := cp.Client.ResourceV1().ResourceClaims(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	gpus := map[string]bool{}
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, d := range c.Status.Allocation.Devices.Results {
			gpus[d.Pool+"/"+d.Device] = true
			if q, ok := d.ConsumedCapacity["memory"]; ok {
				p.Consumed += q.Value()
			}
		}
	}
	p.GPUs = len(gpus)
	slices, err := cp.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var gpuBytes int64
	for _, s := range slices.Items {
		for _, d := range s.Spec.Devices {
			if c, ok := d.Capacity["memory"]; ok {
				gpuBytes = max(gpuBytes, c.Value.Value())
			}
		}
	}
	if gpuBytes > 0 {
		p.LowerBound = int((p.Consumed + gpuBytes - 1) / gpuBytes)
	}
	return p, nil
}

// WebhookCalls is how many times kube-apiserver has called the webhook
// named name (apiserver_admission_webhook_request_total, summed over its
// labels).
func (cp *ControlPlane) WebhookCalls(ctx context.Context, name string) (float64, error) {
	calls, _, err := cp.PackingCounters(ctx, name, "")
	return calls, err
}

// PolicyMutations is how many times kube-apiserver has applied the
// mutations of the MutatingAdmissionPolicy named name
// (apiserver_mutating_admission_policy_check_total, counted once a pod
// matched, summed over bindings and outcomes).
func (cp *ControlPlane) PolicyMutations(ctx context.Context, name string) (float64, error) {
	_, mutations, err := cp.PackingCounters(ctx, "", name)
	return mutations, err
}

// PackingCounters reads both from one scrape of kube-apiserver's
// /metrics (a large page: one read where both are wanted).
func (cp *ControlPlane) PackingCounters(ctx context.Context, webhook, policy string) (calls, mutations float64, err error) {
	raw, err := cp.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("reading kube-apiserver's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return 0, 0, fmt.Errorf("parsing kube-apiserver's metrics: %w", err)
	}
	// The samples of a counter whose label key has value, summed.
	sum := func(metric, key, value string) float64 {
		var total float64
		for _, m := range families[metric].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == value {
					total += m.GetCounter().GetValue()
				}
			}
		}
		return total
	}
	return sum("apiserver_admission_webhook_request_total", "name", webhook),
		sum("apiserver_mutating_admission_policy_check_total", "policy", policy), nil
}
