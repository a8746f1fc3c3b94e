// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"errors"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// uninstall deletes the workload pods (the plugin unprepares their claims
// and stops the MPS daemon), then uninstalls the release, and checks what is
// left: no slice, DeviceClass, webhook, admission policy, plugin pod or
// socket; on the host only the documented state (the checkpoint in the
// plugin data directory, the hook in its directory).
func (e *releaseEnv) uninstall(before []runningContainer) {
	e.t.Helper()
	for _, c := range before {
		if c.spec == "" {
			continue
		}
		e.cp.DeletePod(e.ctx, e.t, releaseWait, c.namespace, c.pod)
		e.poll("the CDI spec of "+c.pod+"'s claim to be removed by Unprepare", func() (bool, error) {
			_, err := statNotExist(c.spec)
			return err == nil, nil
		})
	}
	e.poll("the MPS daemon Pods to be stopped", func() (bool, error) {
		list, err := e.cp.Client.CoreV1().Pods(releaseNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/gpu"})
		return err == nil && len(list.Items) == 0, err
	})

	if err := e.helm.Uninstall(e.ctx, releaseName); err != nil {
		e.t.Fatalf("helm uninstall: %v", err)
	}
	e.poll("the release's pods to be gone", func() (bool, error) {
		list, err := e.cp.Client.CoreV1().Pods(releaseNamespace).List(e.ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 0, err
	})
	for _, class := range []string{"gpufrac.dev", "sm-sharing.gpufrac.dev"} {
		_, err := e.cp.Client.ResourceV1().DeviceClasses().Get(e.ctx, class, metav1.GetOptions{})
		if apiErrIgnoringNotFound(err) != nil || err == nil {
			e.t.Errorf("DeviceClass %s after uninstall: %v", class, err)
		}
	}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName}
	adm := e.cp.Client.AdmissionregistrationV1()
	mw, err1 := adm.MutatingWebhookConfigurations().List(e.ctx, sel)
	vw, err2 := adm.ValidatingWebhookConfigurations().List(e.ctx, sel)
	vap, err3 := adm.ValidatingAdmissionPolicies().List(e.ctx, sel)
	map_, err4 := adm.MutatingAdmissionPolicies().List(e.ctx, sel)
	mapb, err5 := adm.MutatingAdmissionPolicyBindings().List(e.ctx, sel)
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil || len(mw.Items)+len(vw.Items)+len(vap.Items)+len(map_.Items)+len(mapb.Items) != 0 {
		e.t.Errorf("admission objects left after uninstall: %d mutating, %d validating webhook configurations, %d validating, %d mutating policies, %d bindings (%v)",
			len(mw.Items), len(vw.Items), len(vap.Items), len(map_.Items), len(mapb.Items), err)
	}
	// The packing parameter the controller filled in goes with the chart.
	if cms, err := e.cp.Client.CoreV1().ConfigMaps(releaseNamespace).List(e.ctx, metav1.ListOptions{}); err != nil {
		e.t.Errorf("listing ConfigMaps: %v", err)
	} else {
		for _, cm := range cms.Items {
			if strings.HasSuffix(cm.Name, "-packing") {
				e.t.Errorf("ConfigMap %s left after uninstall", cm.Name)
			}
		}
	}
	e.poll("the plugin's registration socket to leave the kubelet's registry", func() (bool, error) {
		names, err := e.node.ReadDir(kubeletRegistry)
		for _, n := range names {
			if strings.HasPrefix(n, "gpufrac.dev") {
				return false, err
			}
		}
		return true, err
	})
	var left []string
	e.poll("no socket left in the plugin data directory", func() (bool, error) {
		names, err := e.node.ReadDir(harness.ChartPluginDataDir)
		left = names
		for _, n := range names {
			if strings.HasSuffix(n, ".sock") {
				return false, err
			}
		}
		return true, err
	})
	// The kubelet deletes a driver's slices of its node once the plugin
	// has unregistered and not come back (its wiping delay, 30 s).
	e.poll("the node's gpufrac.dev ResourceSlices to be gone", func() (bool, error) {
		list, err := e.cp.Client.ResourceV1().ResourceSlices().List(e.ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
		return err == nil && len(list.Items) == 0, err
	})
	hook, _ := e.node.ReadDir(hookDir)
	specs, _ := e.node.ReadDir(e.node.CDIRoot)
	e.t.Logf("left on the host after uninstall (documented): %s: %v; %s: %v; CDI specs in %s: %v",
		harness.ChartPluginDataDir, left, hookDir, hook, e.node.CDIRoot, specs)
	if len(specs) != 0 {
		e.t.Errorf("CDI specs left after the workloads and the release are gone: %v", specs)
	}
	var stray []v1.Pod
	if list, err := e.cp.Client.CoreV1().Pods(releaseNamespace).List(e.ctx, metav1.ListOptions{}); err == nil {
		stray = list.Items
	}
	if len(stray) != 0 {
		e.t.Errorf("pods left in %s: %d", releaseNamespace, len(stray))
	}
}
