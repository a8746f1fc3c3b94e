// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package preparer_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/nvmldiscovery"
	"github.com/gpufrac/gpufrac/internal/node/preparer"
	"github.com/gpufrac/gpufrac/internal/sim/gpusim"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

func guaranteePod(name string, containers ...corev1.Container) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("pod-" + name)},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}}, Containers: containers}}
}

func using(name string) corev1.Container {
	return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}
}

// A claim with a guarantee the node enforces per container is prepared for
// one holder only; on a node that enforces nothing per cgroup sharing it
// multiplies nothing and passes.
func TestPrepareRefusesAMultipliedGuarantee(t *testing.T) {
	sidecar := using("side")
	sidecar.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	twoSidecarAndMain := guaranteePod("sc", using("main"))
	twoSidecarAndMain.Spec.InitContainers = []corev1.Container{sidecar}
	twoNames := guaranteePod("names", using("main"), corev1.Container{Name: "helper", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "alias"}}}})
	twoNames.Spec.ResourceClaims = append(twoNames.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "alias", ResourceClaimName: ptr.To("shared")})
	initThenMain := guaranteePod("init", using("main"))
	initThenMain.Spec.InitContainers = []corev1.Container{using("warmup")}
	for _, tc := range []struct {
		name        string
		enforcement domain.Enforcement
		pods        []*corev1.Pod
		want        string
	}{
		{name: "one container", enforcement: domain.EnforcementDMem, pods: []*corev1.Pod{guaranteePod("a", using("main"), corev1.Container{Name: "other"})}},
		{name: "an init container, then the app container", enforcement: domain.EnforcementDMem, pods: []*corev1.Pod{initThenMain}},
		{name: "two containers", enforcement: domain.EnforcementDMem, pods: []*corev1.Pod{guaranteePod("a", using("main"), using("helper"))},
			want: "to container main of pod a and container helper of pod a at once"},
		{name: "a sidecar and the app container", enforcement: domain.EnforcementDMem, pods: []*corev1.Pod{twoSidecarAndMain},
			want: "sidecar side of pod sc and container main of pod sc"},
		{name: "two pods", enforcement: domain.EnforcementDMem, pods: []*corev1.Pod{guaranteePod("a", using("main")), guaranteePod("b", using("main"))},
			want: "to pod a and pod b at once"},
		// The kubelet prepares a claim once for the pod, whatever the
		// number of names the pod gives it.
		{name: "one claim under two names", enforcement: domain.EnforcementDMem, pods: []*corev1.Pod{twoNames},
			want: "to container main of pod names and container helper of pod names at once"},
		{name: "two containers on an older-driver node", enforcement: domain.EnforcementMPS, pods: []*corev1.Pod{guaranteePod("a", using("main"), using("helper"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			n, err := gpusim.NewNode("h200x2", node, tc.enforcement)
			if err != nil {
				t.Fatal(err)
			}
			inv, err := nvmldiscovery.Discover(ctx, n.NVML, n.InventoryOptions)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			ckpt, err := checkpoint.Open(ctx, filepath.Join(dir, "checkpoint.json"), "boot-1")
			if err != nil {
				t.Fatal(err)
			}
			cdi, err := cdispec.NewWriter(filepath.Join(dir, "cdi"), cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode})
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*corev1.Pod{}
			claim := allocated("shared", "gpu-0", "s1", "20Gi", "")
			for _, p := range tc.pods {
				byName[p.Name] = p
				claim.Status.ReservedFor = append(claim.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p.Name, UID: p.UID})
			}
			events := &eventLog{}
			mps := &fakeMPS{users: map[string]map[types.UID]bool{}}
			p := preparer.New(preparer.Config{
				Inventory: inv, PlanOptions: plan.Options{NodeName: node, MPSRoot: filepath.Join(dir, "mps")},
				Checkpoint: ckpt, CDI: cdi, Status: &statusLog{prepared: map[types.UID]*plan.Claim{}}, Events: events,
				// Every share on an r615 node is an MPS client (issue 15).
				MPS: mps,
				Pods: func(_ context.Context, claim *resourceapi.ResourceClaim, ref resourceapi.ResourceClaimConsumerReference) (*corev1.Pod, error) {
					namespace, name := claim.Namespace, ref.Name
					if pod, ok := byName[name]; ok && namespace == "ns" {
						return pod, nil
					}
					return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, name)
				},
			})
			_, err = p.Prepare(ctx, claim)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var invalid *plan.InvalidError
			if !errors.As(err, &invalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "Give each container its own claim") {
				t.Fatalf("got %v, want an InvalidError containing %q", err, tc.want)
			}
			if len(ckpt.Entries()) != 0 || len(events.events) != 1 || len(mps.users) != 0 {
				t.Errorf("a refused claim left checkpoint entries %v, events %v", ckpt.Entries(), events.events)
			}
		})
	}
}
