// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"k8s.io/utils/ptr"
)

// ReadsMissingParameters tells whether this control plane's kube-apiserver
// reads an admission policy's parameter from the API when its informer
// cache lacks it: Kubernetes 1.37 and later do (k8s.io/apiserver
// v0.37.2, policy/generic/policy_dispatcher.go: CollectParams falls back
// to a direct GET). Before 1.37 the cache is all there is, and for
// ConfigMap parameters that cache is the API server's shared ConfigMap
// informer, started under the context of the first policy that names
// ConfigMap parameters. When the last such policy (or its binding) is
// removed the context is cancelled and the informer stops, and the
// shared informer factory never starts an informer twice
// (policy_source.go, ensureParamsForPolicyLocked and the orphaned param
// informers' cleanup in calculatePolicyData; v0.36.3). A policy bound
// later then never sees a parameter created after that until
// kube-apiserver restarts: the packing policy does nothing (it fails open)
// and the packing webhook packs every pod.
func (cp *ControlPlane) ReadsMissingParameters() bool {
	v, err := version.ParseSemantic(cp.KubeVersion)
	return err != nil || !v.LessThan(version.MajorMinor(1, 37))
}

// ParamAnchorName names the inert policy and binding KeepParameterInformer
// registers.
const ParamAnchorName = "harness-configmap-parameters"

// KeepParameterInformer registers, on a kube-apiserver that does not read
// missing parameters (ReadsMissingParameters), an inert
// MutatingAdmissionPolicy with ConfigMap parameters and its binding, for
// the control plane's life: tests that register and remove the packing
// policy one after another then never remove the last policy with
// ConfigMap parameters, which would stop the API server's parameter
// informer for good. A 1.36 cluster can keep such a policy bound the same
// way (docs/install.md). The policy matches no object.
func (cp *ControlPlane) KeepParameterInformer(ctx context.Context) error {
	if cp.ReadsMissingParameters() {
		return nil
	}
	policy := &admissionregistrationv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ParamAnchorName},
		Spec: admissionregistrationv1.MutatingAdmissionPolicySpec{
			ParamKind: &admissionregistrationv1.ParamKind{APIVersion: "v1", Kind: "ConfigMap"},
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			FailurePolicy:      ptr.To(admissionregistrationv1.Ignore),
			ReinvocationPolicy: admissionregistrationv1.NeverReinvocationPolicy,
			MatchConditions:    []admissionregistrationv1.MatchCondition{{Name: "never", Expression: "false"}},
			Mutations: []admissionregistrationv1.Mutation{{
				PatchType:          admissionregistrationv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionregistrationv1.ApplyConfiguration{Expression: "Object{}"},
			}},
		},
	}
	binding := &admissionregistrationv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: ParamAnchorName},
		Spec: admissionregistrationv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName: ParamAnchorName,
			ParamRef: &admissionregistrationv1.ParamRef{Name: ParamAnchorName, Namespace: "default",
				ParameterNotFoundAction: ptr.To(admissionregistrationv1.AllowAction)},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"gpufrac.dev/harness-never": "true"}}},
		},
	}
	ar := cp.Client.AdmissionregistrationV1()
	if _, err := ar.MutatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("registering the parameter informer's anchor policy: %w", err)
	}
	if _, err := ar.MutatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding the parameter informer's anchor policy: %w", err)
	}
	return nil
}
