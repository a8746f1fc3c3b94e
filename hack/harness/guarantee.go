// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// GuaranteePolicyName names the one-guarantee ValidatingAdmissionPolicy
// and its binding in deployments/webhooks.yaml (the chart renders the
// same, test/helm checks).
const GuaranteePolicyName = "gpufrac-one-guarantee"

// ApplyGuaranteePolicy registers the one-guarantee policy and its binding
// of deployments/webhooks.yaml, as they are, and returns once the API
// server enforces them: a probe claim of namespace, allocated a gpufrac
// device, is refused a second consumer. The objects are cluster-wide and
// stay (a second call finds them); they only refuse what gpufrac refuses
// anyway.
func (cp *ControlPlane) ApplyGuaranteePolicy(ctx context.Context, namespace string) error {
	policy, binding, err := readGuaranteeReference()
	if err != nil {
		return err
	}
	ar := cp.Client.AdmissionregistrationV1()
	if _, err := ar.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering the one-guarantee policy: %w", err)
	}
	if _, err := ar.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("binding the one-guarantee policy: %w", err)
	}
	claims := cp.Client.ResourceV1().ResourceClaims(namespace)
	probe, err := claims.Create(ctx, GuaranteeProbeClaim("guarantee-probe"), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating the probe claim: %w", err)
	}
	defer func() { _ = claims.Delete(context.WithoutCancel(ctx), probe.Name, metav1.DeleteOptions{}) }()
	// The API server picks policies up asynchronously: until it does, the
	// second consumer is accepted, and is taken off again.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		c, err := claims.Get(ctx, probe.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c.Status = ReservedFor(c.Status, nil, "probe-a", "probe-b")
		_, err = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
		switch {
		case apierrors.IsForbidden(err) || apierrors.IsInvalid(err):
			return true, nil
		case err == nil:
			c, err := claims.Get(ctx, probe.Name, metav1.GetOptions{})
			if err == nil {
				c.Status.ReservedFor = nil
				_, _ = claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
			}
		}
		return false, nil
	})
}

// GuaranteeProbeClaim is a claim of one gpufrac device, for status
// updates written by hand (ReservedFor).
func GuaranteeProbeClaim(name string) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpufrac.dev"}}}}}}
}

// ReservedFor is status allocated one gpufrac device (when it has no
// allocation yet) and reserved for the pods named, with the UIDs uid gives
// (nil: made up from the name), as the scheduler writes it. The resource
// claim controller removes a reservation for a pod that does not exist.
func ReservedFor(status resourceapi.ResourceClaimStatus, uid func(string) types.UID, pods ...string) resourceapi.ResourceClaimStatus {
	if uid == nil {
		uid = func(name string) types.UID { return types.UID("uid-" + name) }
	}
	if status.Allocation == nil {
		status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: "gpufrac.dev", Pool: "probe-node", Device: "gpu-0"}}}}
	}
	status.ReservedFor = nil
	for _, p := range pods {
		status.ReservedFor = append(status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: uid(p)})
	}
	return status
}

// readGuaranteeReference reads the one-guarantee policy and its binding
// from the reference admission configuration.
func readGuaranteeReference() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(root, "deployments", "webhooks.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var policy *admissionregistrationv1.ValidatingAdmissionPolicy
	var binding *admissionregistrationv1.ValidatingAdmissionPolicyBinding
	for doc, err := range yamldocs.All(data) {
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			policy = &admissionregistrationv1.ValidatingAdmissionPolicy{}
			err = yaml.UnmarshalStrict(doc, policy)
		case "ValidatingAdmissionPolicyBinding":
			binding = &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			err = yaml.UnmarshalStrict(doc, binding)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if policy == nil || binding == nil || policy.Name != GuaranteePolicyName || binding.Spec.PolicyName != GuaranteePolicyName {
		return nil, nil, fmt.Errorf("%s lacks the %s policy and its binding", path, GuaranteePolicyName)
	}
	return policy, binding, nil
}
