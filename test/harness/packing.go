package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/kai"
	"github.com/gpufrac/gpufrac/test/kubebuild"
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
	config string
	cp     *ControlPlane
}

// Stop ends the controller and leaves its webhook configuration in place,
// as a controller outage does: the API server keeps calling a webhook
// that no longer answers.
func (c *Controller) Stop() error {
	c.once.Do(func() {
		c.cancel()
		c.err = <-c.done
	})
	return c.err
}

// Close stops the controller and removes its webhook configuration.
func (c *Controller) Close() error {
	err := c.Stop()
	delErr := c.cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.Background(), c.config, metav1.DeleteOptions{})
	if apierrors.IsNotFound(delErr) {
		delErr = nil
	}
	return errors.Join(err, delErr)
}

// StartPacking runs gpufrac-controller and registers its packing webhook
// exactly as the chart does (the packing.pods.gpufrac.dev entry of
// deployments/webhooks.yaml, which test/helm checks against the chart), but
// reached by URL on loopback instead of through a Service. It returns once
// the API server calls the webhook for pods of namespace.
func (cp *ControlPlane) StartPacking(ctx context.Context, namespace string) (_ *Controller, finalErr error) {
	hook, err := chartPackingWebhook()
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
	c := &Controller{cancel: cancel, done: make(chan error, 1), config: namespace + "-gpufrac-packing", cp: cp}
	go func() {
		c.done <- controller.Run(runCtx, controller.Config{
			Client: client, WebhookAddress: "127.0.0.1:0", CertDir: dir, PackingLabels: true,
			Ready: func(addr string) { ready <- addr },
		})
	}()
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
	hook.ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + admission.PathPackPods), CABundle: certPEM}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: c.config},
		Webhooks:   []admissionregistrationv1.MutatingWebhook{*hook},
	}
	if _, err := cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("registering the packing webhook: %w", err)
	}
	// The API server picks configurations up asynchronously.
	if err := cp.waitPackingWebhook(ctx, namespace, true); err != nil {
		return nil, fmt.Errorf("waiting for the API server to call the packing webhook: %w", err)
	}
	return c, nil
}

// WaitPackingWebhookGone returns once the API server no longer calls the
// packing webhook for pods of namespace (after Controller.Close, which
// removes its configuration: the API server drops it a little later).
func (cp *ControlPlane) WaitPackingWebhookGone(ctx context.Context, namespace string) error {
	if err := cp.waitPackingWebhook(ctx, namespace, false); err != nil {
		return fmt.Errorf("waiting for the API server to drop the packing webhook: %w", err)
	}
	return nil
}

// waitPackingWebhook waits until a dry run of a fraction pod in namespace
// comes back labelled by the packing webhook (called) or not (gone).
func (cp *ControlPlane) waitPackingWebhook(ctx context.Context, namespace string, called bool) error {
	probe := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-packing-probe", Annotations: map[string]string{kai.AnnotationTranslated: "probe"}},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("probe")}},
			Containers:     []v1.Container{{Name: "main", Image: "busybox"}},
		},
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := cp.Client.CoreV1().Pods(namespace).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && (got.Labels[admission.LabelFraction] == "true") == called, nil
	})
}

// chartPackingWebhook reads the packing webhook from the reference
// admission configuration.
func chartPackingWebhook() (*admissionregistrationv1.MutatingWebhook, error) {
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(root, "deployments", "webhooks.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		if err := yaml.Unmarshal(doc, &mwc); err != nil || mwc.Kind != "MutatingWebhookConfiguration" {
			continue
		}
		for _, h := range mwc.Webhooks {
			if strings.HasPrefix(h.Name, "packing.") {
				return &h, nil
			}
		}
	}
	return nil, fmt.Errorf("%s has no packing webhook", path)
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
