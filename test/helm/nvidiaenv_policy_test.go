// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"context"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

// TestNVIDIAEnvPolicyRefusesUnprivilegedPodsThatNameGPUs installs the
// chart's optional nvidiaEnvPolicy for real and sends pods to the API
// server: an unprivileged container, init container or ephemeral container
// that sets NVIDIA_VISIBLE_DEVICES or NVIDIA_DRIVER_CAPABILITIES is
// refused, naming it; a container NVIDIA's runtime counts as privileged
// (privileged, or SYS_ADMIN added: CAP_SYS_ADMIN in its bounding set) is
// allowed with the same variable, as are pods without it, an envFrom the
// policy cannot judge, and pods in an excluded namespace.
func TestNVIDIAEnvPolicyRefusesUnprivilegedPodsThatNameGPUs(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const ns, excluded = "envpol-workload", "envpol-excluded"
	vs := valueSet{name: "nvidia-env-policy", release: "envpol", namespace: "envpol-system", values: map[string]any{
		"nvidiaEnvPolicy": map[string]any{"enabled": true, "excludedNamespaces": []any{excluded}},
	}}
	objs, _, err := render(loadChart(t), vs)
	if err != nil {
		t.Fatal(err)
	}
	a := newApplier(t)
	installed := 0
	for _, o := range objs {
		if !strings.HasPrefix(o.GetKind(), "ValidatingAdmissionPolicy") || !strings.HasSuffix(o.GetName(), "-nvidia-env") {
			continue
		}
		if err := a.apply(ctx, o, false); err != nil {
			t.Fatalf("installing: %v", err)
		}
		installed++
		r, _ := a.resource(o)
		name := o.GetName()
		t.Cleanup(func() { _ = r.Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{}) })
	}
	if installed != 2 {
		t.Fatalf("the chart rendered %d nvidia-env policy objects, want the policy and its binding", installed)
	}
	ensureNamespace(ctx, t, ns)
	ensureNamespace(ctx, t, excluded)

	env := func(name string) []v1.EnvVar {
		return []v1.EnvVar{{Name: "KEEP", Value: "1"}, {Name: name, Value: "all"}}
	}
	privileged := &v1.SecurityContext{Privileged: ptr.To(true)}
	sysAdmin := &v1.SecurityContext{Capabilities: &v1.Capabilities{Add: []v1.Capability{"SYS_ADMIN"}}}
	pod := func(namespace string, init, main v1.Container) *v1.Pod {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "envpol-", Namespace: namespace}, Spec: v1.PodSpec{Containers: []v1.Container{main}}}
		if init.Name != "" {
			p.Spec.InitContainers = []v1.Container{init}
		}
		return p
	}
	c := func(name string, e []v1.EnvVar, sc *v1.SecurityContext) v1.Container {
		return v1.Container{Name: name, Image: "registry.k8s.io/pause:3.10", Env: e, SecurityContext: sc}
	}
	create := func(p *v1.Pod) error {
		_, err := cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}

	// A binding takes effect a moment after it is created.
	refused := pod(ns, v1.Container{}, c("app", env("NVIDIA_VISIBLE_DEVICES"), nil))
	var denial error
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		denial = create(refused)
		return denial != nil, nil
	}); err != nil {
		t.Fatalf("an unprivileged pod with NVIDIA_VISIBLE_DEVICES was admitted: %v", err)
	}
	for _, tc := range []struct {
		name   string
		pod    *v1.Pod
		refuse string // "" = admitted
	}{
		{"container NVIDIA_VISIBLE_DEVICES", refused, "unprivileged container(s) app set NVIDIA_VISIBLE_DEVICES or NVIDIA_DRIVER_CAPABILITIES"},
		{"container NVIDIA_DRIVER_CAPABILITIES", pod(ns, v1.Container{}, c("app", env("NVIDIA_DRIVER_CAPABILITIES"), nil)), "unprivileged container(s) app set"},
		{"init container", pod(ns, c("setup", env("NVIDIA_VISIBLE_DEVICES"), nil), c("app", nil, nil)), "unprivileged container(s) setup set"},
		{"valueFrom", pod(ns, v1.Container{}, c("app", []v1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}, nil)), "unprivileged container(s) app set"},
		{"privileged container", pod(ns, v1.Container{}, c("app", env("NVIDIA_VISIBLE_DEVICES"), privileged)), ""},
		{"SYS_ADMIN added", pod(ns, c("setup", env("NVIDIA_DRIVER_CAPABILITIES"), sysAdmin), c("app", nil, nil)), ""},
		{"no NVIDIA variable", pod(ns, v1.Container{}, c("app", env("CUDA_VISIBLE_DEVICES"), nil)), ""},
		{"envFrom cannot be judged", pod(ns, v1.Container{}, v1.Container{Name: "app", Image: "registry.k8s.io/pause:3.10",
			EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "nvidia"}}}}}), ""},
		{"excluded namespace", pod(excluded, v1.Container{}, c("app", env("NVIDIA_VISIBLE_DEVICES"), nil)), ""},
	} {
		err := create(tc.pod)
		switch {
		case tc.refuse == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refuse != "" && err == nil:
			t.Errorf("%s: admitted", tc.name)
		case tc.refuse != "" && (!apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.refuse)):
			t.Errorf("%s: error %v, want a refusal saying %q", tc.name, err, tc.refuse)
		}
	}

	// kubectl debug: an ephemeral container added to a running pod.
	target, err := cp.Client.CoreV1().Pods(ns).Create(ctx, pod(ns, v1.Container{}, c("app", nil, nil)), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cp.Client.CoreV1().Pods(ns).Delete(context.WithoutCancel(ctx), target.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	})
	// The pod's status changes meanwhile (the scheduler): a conflict is
	// retried on the latest version, a refusal is not.
	debug := func(name string, sc *v1.SecurityContext) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p, err := cp.Client.CoreV1().Pods(ns).Get(ctx, target.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, v1.EphemeralContainer{EphemeralContainerCommon: v1.EphemeralContainerCommon{
				Name: name, Image: "registry.k8s.io/pause:3.10", Env: env("NVIDIA_VISIBLE_DEVICES"), SecurityContext: sc,
			}})
			_, err = cp.Client.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, p.Name, p, metav1.UpdateOptions{})
			return err
		})
	}
	if err := debug("debugger", nil); err == nil || !strings.Contains(err.Error(), "unprivileged container(s) debugger set") {
		t.Errorf("an unprivileged ephemeral container with NVIDIA_VISIBLE_DEVICES: %v, want refused", err)
	}
	if err := debug("root-debugger", privileged); err != nil {
		t.Errorf("a privileged ephemeral container was refused: %v", err)
	}
}
