// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/packing/podterms"
)

// TestPackingPolicyPatchesAsTheWebhook: the packing
// MutatingAdmissionPolicy of deployments/webhooks.yaml, applied by the real
// kube-apiserver, gives every pod shape exactly what the packing webhook's
// patch (podterms.Patch) gives it, without calling the webhook;
// pods the policy cannot tell (a whole-GPU template, a template newer than
// its parameter) still reach the webhook, opted-out pods get nothing, and a
// pod that arrives labelled a fraction reaches neither.
func TestPackingPolicyPatchesAsTheWebhook(t *testing.T) {
	e := newEnv(t)
	class := e.classFor("policy", "")
	e.createTemplate(claimTemplate("frac", class, "16Gi", 1, ""))
	whole := claimTemplate("whole", class, "1Gi", 1, "")
	whole.Spec.Spec.Devices.Requests[0].Exactly.Capacity = nil
	e.createTemplate(whole)
	ctrl, err := cp.StartPacking(e.ctx, e.ns, harness.PackingOptions{PolicyTemplate: "frac"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctrl.Close() })
	policy := harness.PackingPolicyName(e.ns)

	pod := func(mutate func(*v1.Pod), templates ...string) *v1.Pod {
		p := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "shape"},
			Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "busybox"}}},
		}
		for i, tmpl := range templates {
			p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, v1.PodResourceClaim{
				Name: "gpu" + string(rune('a'+i)), ResourceClaimTemplateName: ptr.To(tmpl)})
		}
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	userTerm := v1.PreferredSchedulingTerm{Weight: 7, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{
		{Key: "zone", Operator: v1.NodeSelectorOpIn, Values: []string{"a"}}}}}
	required := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
		{Key: "pool", Operator: v1.NodeSelectorOpIn, Values: []string{"gpu"}}}}}}
	packed := pod(nil, "frac")
	if err := applyPatch(packed, podterms.Patch(packed)); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		pod  *v1.Pod
		// viaPolicy: the policy packs it and the webhook is not called.
		viaPolicy bool
		// packed: the pod comes back with the webhook's patch applied.
		packed bool
		// neither: the policy leaves it and the webhook's object selector
		// keeps it from the webhook (a pod that arrives labelled a
		// fraction counts as packed).
		neither bool
	}{
		{name: "bare", pod: pod(nil, "frac"), viaPolicy: true, packed: true},
		{name: "labels", pod: pod(func(p *v1.Pod) { p.Labels = map[string]string{"app": "llm"} }, "frac"), viaPolicy: true, packed: true},
		{name: "fraction label false", pod: pod(func(p *v1.Pod) { p.Labels = map[string]string{podterms.LabelFraction: "false"} }, "frac"), viaPolicy: true, packed: true},
		{name: "pod anti-affinity", pod: pod(func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{PodAntiAffinity: &v1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.WeightedPodAffinityTerm{{
				Weight: 5, PodAffinityTerm: v1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"}}}}}
		}, "frac"), viaPolicy: true, packed: true},
		{name: "required node affinity", pod: pod(func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: required}}
		}, "frac"), viaPolicy: true, packed: true},
		{name: "preferred node affinity of its own", pod: pod(func(p *v1.Pod) {
			p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{userTerm}}}
		}, "frac"), viaPolicy: true, packed: true},
		{name: "whole GPU then fraction", pod: pod(nil, "whole", "frac"), viaPolicy: true, packed: true},
		{name: "already packed", pod: packed.DeepCopy(), viaPolicy: true, packed: true},
		{name: "whole GPU", pod: pod(nil, "whole")},
		{name: "opted out", pod: pod(func(p *v1.Pod) { p.Annotations = map[string]string{podterms.AnnotationPacking: "false"} }, "frac")},
		{name: "unknown template", pod: pod(nil, "not-yet")},
		{name: "labelled a fraction, unknown template", pod: pod(func(p *v1.Pod) { p.Labels = map[string]string{podterms.LabelFraction: "true"} }, "not-yet"), neither: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.pod.DeepCopy()
			if tc.packed {
				if err := applyPatch(want, podterms.Patch(want)); err != nil {
					t.Fatal(err)
				}
			}
			hooks, err := cp.WebhookCalls(e.ctx, harness.PackingWebhookName)
			if err != nil {
				t.Fatal(err)
			}
			mutations, err := cp.PolicyMutations(e.ctx, policy)
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, tc.pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil {
				t.Fatal(err)
			}
			if got.Labels[podterms.LabelFraction] != want.Labels[podterms.LabelFraction] || !equality.Semantic.DeepEqual(got.Spec.Affinity, want.Spec.Affinity) {
				t.Errorf("admitted with labels %v and affinity\n%s\nwant labels %v and affinity\n%s",
					got.Labels, asJSON(got.Spec.Affinity), want.Labels, asJSON(want.Spec.Affinity))
			}
			hooksAfter, err := cp.WebhookCalls(e.ctx, harness.PackingWebhookName)
			if err != nil {
				t.Fatal(err)
			}
			mutationsAfter, err := cp.PolicyMutations(e.ctx, policy)
			if err != nil {
				t.Fatal(err)
			}
			if viaPolicy := mutationsAfter > mutations; viaPolicy != tc.viaPolicy {
				t.Errorf("applied by the policy: %v, want %v", viaPolicy, tc.viaPolicy)
			}
			if called, want := hooksAfter > hooks, !tc.viaPolicy && !tc.neither; called != want {
				t.Errorf("webhook called: %v, want %v", called, want)
			}
		})
	}

	// A template created now reaches the parameter, and its pods the
	// policy, within a few seconds.
	e.createTemplate(claimTemplate("later", class, "8Gi", 1, ""))
	e.poll("pods of a new template packed by the policy", func() (bool, error) {
		before, err := cp.PolicyMutations(e.ctx, policy)
		if err != nil {
			return false, err
		}
		got, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod(nil, "later"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		after, err := cp.PolicyMutations(e.ctx, policy)
		return got.Labels[podterms.LabelFraction] == "true" && after > before, err
	})
	// And a template deleted leaves it.
	if err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Delete(e.ctx, "later", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.poll("the deleted template out of the parameter", func() (bool, error) {
		cm, err := e.client.CoreV1().ConfigMaps(e.ns).Get(e.ctx, "gpufrac-packing", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, listed := cm.Data[e.ns+".later"]
		_, frac := cm.Data[e.ns+".frac"]
		return !listed && frac, nil
	})
}

// applyPatch applies JSON patch operations to pod as the API server
// applies a webhook's patch.
func applyPatch(pod *v1.Pod, ops []podterms.PatchOp) error {
	if len(ops) == 0 {
		return nil
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		return err
	}
	patchJSON, err := json.Marshal(ops)
	if err != nil {
		return err
	}
	p, err := jsonpatch.DecodePatch(patchJSON)
	if err != nil {
		return err
	}
	out, err := p.Apply(raw)
	if err != nil {
		return err
	}
	*pod = v1.Pod{}
	return json.Unmarshal(out, pod)
}

func asJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// TestPackingPolicyAfterTheLastParamPolicyWentAway pins what a cluster
// gets once the last MutatingAdmissionPolicy with ConfigMap parameters was
// removed from a running kube-apiserver (the packing policy turned off
// and on again, gpufrac reinstalled) and the packing policy is bound
// anew, in a namespace whose parameter is created after that: from 1.37
// the API server reads the missing parameter and the policy packs; on
// 1.36 its parameter informer stopped for good
// (harness.ReadsMissingParameters), the policy does nothing and the
// webhook packs every pod, as with controller.packing.admissionPolicy=false.
// On 1.36 it runs on a control plane of its own, since the shared one
// keeps that informer alive (KeepParameterInformer).
func TestPackingPolicyAfterTheLastParamPolicyWentAway(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	plane := cp
	if !cp.ReadsMissingParameters() {
		own, err := harness.Start(ctx, harness.Options{Progress: os.Stderr, PluginBinary: cp.PluginBinary})
		if err != nil {
			t.Fatalf("starting a control plane of its own: %v", err)
		}
		t.Cleanup(func() { _ = own.Close() })
		plane = own
	}
	round := func(prefix string) (*harness.Controller, string) {
		t.Helper()
		ns := plane.TestNamespace(ctx, t, prefix, 25, waitTimeout)
		class := ns + "-policy"
		if _, err := plane.Client.ResourceV1().DeviceClasses().Create(ctx, &resourceapi.DeviceClass{
			ObjectMeta: metav1.ObjectMeta{Name: class},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpufrac.dev"`}}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = plane.Client.ResourceV1().DeviceClasses().Delete(context.WithoutCancel(ctx), class, metav1.DeleteOptions{})
		})
		if _, err := plane.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate("frac", class, "16Gi", 1, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		opts := harness.PackingOptions{}
		if prefix == "gf-first-" || plane.ReadsMissingParameters() {
			opts.PolicyTemplate = "frac"
		}
		ctrl, err := plane.StartPacking(ctx, ns, opts)
		if err != nil {
			t.Fatal(err)
		}
		return ctrl, ns
	}

	// The first policy with ConfigMap parameters is applied...
	first, ns := round("gf-first-")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	// ...and removed, the last of them on this API server.
	if err := plane.WaitPackingGone(ctx, ns, "frac"); err != nil {
		t.Fatal(err)
	}
	second, ns := round("gf-second-")
	t.Cleanup(func() { _ = second.Close() })
	policy := harness.PackingPolicyName(ns)
	probe := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: v1.PodSpec{
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To("frac")}},
			Containers:     []v1.Container{{Name: "app", Image: "busybox"}},
		},
	}
	// Long enough for the policy to reach its parameter had the informer
	// lived (StartPacking's own wait for it is 60 s; it takes a second or
	// two), short of that wait.
	deadline := time.Now().Add(15 * time.Second)
	for {
		calls, mutations, err := plane.PackingCounters(ctx, harness.PackingWebhookName, policy)
		if err != nil {
			t.Fatal(err)
		}
		got, err := plane.Client.CoreV1().Pods(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		callsAfter, mutationsAfter, err := plane.PackingCounters(ctx, harness.PackingWebhookName, policy)
		if err != nil {
			t.Fatal(err)
		}
		if got.Labels[podterms.LabelFraction] != "true" {
			t.Fatalf("%s: the probe was not packed (labels %v)", plane.KubeVersion, got.Labels)
		}
		byPolicy, byWebhook := mutationsAfter > mutations, callsAfter > calls
		if plane.ReadsMissingParameters() {
			if !byPolicy || byWebhook {
				t.Fatalf("%s: packed by the policy %v, by the webhook %v; want the policy alone", plane.KubeVersion, byPolicy, byWebhook)
			}
			return
		}
		if byPolicy || !byWebhook {
			t.Fatalf("%s: packed by the policy %v, by the webhook %v; want the webhook alone (the parameter informer stopped)", plane.KubeVersion, byPolicy, byWebhook)
		}
		if time.Now().After(deadline) {
			t.Logf("%s: the re-bound packing policy never reached its parameter; the webhook packed every probe", plane.KubeVersion)
			return
		}
		time.Sleep(time.Second)
	}
}
