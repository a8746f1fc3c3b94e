// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// TestResourceQuotaLimitsTranslatedClaims: what a KAI shop keeps of its
// queue quotas after migrating is Kubernetes' own ResourceQuota per
// DeviceClass (docs/kai-migration.md, "What a migrated team keeps"). With
// the real API server's quota admission and the real quota controller, a
// quota of one `<class>.deviceclass.resource.k8s.io/devices` in a
// namespace lets one translated pod's claim be created and run, refuses
// the second pod's claim (the controller-manager reports it on the pod),
// and the second pod gets its claim and runs once the first is gone.
func TestResourceQuotaLimitsTranslatedClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("quota", "")
	e.startWebhook(class)

	quotaName := v1.ResourceName(class + v1.ResourceClaimsPerClass)
	quota := &v1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-shares"},
		Spec:       v1.ResourceQuotaSpec{Hard: v1.ResourceList{quotaName: resource.MustParse("1")}},
	}
	if _, err := e.client.CoreV1().ResourceQuotas(e.ns).Create(e.ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the quota: %v", err)
	}
	// The quota admits nothing until its controller has computed its
	// status (the API server refuses with "status unknown for quota").
	e.poll("the quota controller to fill in the quota's status", func() (bool, error) {
		q, err := e.client.CoreV1().ResourceQuotas(e.ns).Get(e.ctx, "gpu-shares", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := q.Status.Hard[quotaName]
		return ok, nil
	})

	for _, name := range []string{"first", "second"} {
		p, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, kaiPod(name, node.Name, map[string]string{"gpu-memory": "20000"}), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating pod %s: %v", name, err)
		}
		if p.Annotations[kai.AnnotationTranslated] == "" {
			t.Fatalf("pod %s was not translated", name)
		}
		if name == "first" {
			e.waitRunning(name)
		}
	}
	// The second pod's claim is refused by the quota, and the pod says so.
	e.poll("the quota's refusal of the second pod's claim", func() (bool, error) {
		for _, ev := range e.events("second", "FailedResourceClaimCreation") {
			if strings.Contains(ev.Message, "exceeded quota") && strings.Contains(ev.Message, string(quotaName)) {
				return true, nil
			}
		}
		return false, nil
	})
	if p := e.pod("second"); len(p.Status.ResourceClaimStatuses) != 0 && p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
		t.Fatalf("the second pod got claim %s past a quota of one", *p.Status.ResourceClaimStatuses[0].ResourceClaimName)
	}
	q, err := e.client.CoreV1().ResourceQuotas(e.ns).Get(e.ctx, "gpu-shares", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if used := q.Status.Used[quotaName]; used.Value() != 1 {
		t.Errorf("quota used %s, want 1 (the first pod's claim)", used.String())
	}

	// The first pod's claim goes with it (garbage collection; the quota
	// controller then recounts); the second pod's claim is created at the
	// resourceclaim controller's next try, and the pod runs. Its retries of
	// a refused pod back off exponentially, so the test touches the pod (a
	// label), which queues it at once, as any update of the pod would.
	e.deletePod("first")
	nudge := 0
	e.poll("pod second to get its claim and run once the first is gone", func() (bool, error) {
		nudge++
		patch := []byte(fmt.Sprintf(`{"metadata":{"labels":{"gpufrac.dev/test-nudge":"%d"}}}`, nudge))
		p, err := e.client.CoreV1().Pods(e.ns).Patch(e.ctx, "second", types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			return false, err
		}
		if running(p) {
			return true, nil
		}
		return false, fmt.Errorf("pod second: %s", whyNotRunning(p))
	})
}
