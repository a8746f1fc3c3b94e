// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// startWebhook runs gpufrac-controller's webhook for this test's namespace.
func (e *env) startWebhook(class string) {
	e.t.Helper()
	w, err := cp.StartWebhook(e.ctx, e.ns, kai.Options{TimeSlicingClass: class, SMSharingClass: class})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		if err := w.Stop(); err != nil {
			e.t.Errorf("stopping the webhook: %v", err)
		}
	})
}

func kaiPod(name, node string, annotations map[string]string) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "nvcr.io/nvidia/cuda:13.0.0-base-ubuntu24.04", Command: []string{"sleep", "infinity"}}}},
	}
	if node != "" {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	return p
}

// TestKAIAnnotatedPodRunsWithItsShare creates KAI-annotated pods through the
// real API server: the running webhook translates them (moving them off
// kai-scheduler), gpufrac-controller's loop creates the template the pod
// names, the controller-manager creates the claim, the scheduler allocates
// it, and the pod runs with the memory the annotations asked for; an
// invalid pod is refused with the annotation and KAI's reason.
func TestKAIAnnotatedPodRunsWithItsShare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("kai", "")
	e.startWebhook(class)

	pod := kaiPod("kai-llm", node.Name, map[string]string{
		"nvidia.com/container.main.gpu-memory.request": "20Gi",
		"nvidia.com/container.main.gpu-memory.limit":   "30Gi",
	})
	pod.Spec.SchedulerName = "kai-scheduler"
	created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the annotated pod: %v", err)
	}
	if len(created.Spec.ResourceClaims) != 1 || created.Annotations[kai.AnnotationTranslated] == "" {
		t.Fatalf("the pod was not translated: claims %+v, annotations %v", created.Spec.ResourceClaims, created.Annotations)
	}
	if created.Spec.SchedulerName != v1.DefaultSchedulerName {
		t.Errorf("schedulerName %q: KAI would act on the pod too", created.Spec.SchedulerName)
	}
	tmplName := *created.Spec.ResourceClaims[0].ResourceClaimTemplateName
	var stored *resourceapi.ResourceClaimTemplate
	e.poll("the template "+tmplName+" made by gpufrac-controller's loop", func() (bool, error) {
		var err error
		stored, err = e.client.ResourceV1().ResourceClaimTemplates(e.ns).Get(e.ctx, tmplName, metav1.GetOptions{})
		return err == nil, nil
	})
	// The API server's defaulting leaves the spec as computed, so the
	// webhook's check of an existing template by spec holds for the next pod.
	if want, err := kai.TemplateFor(created, kai.Options{TimeSlicingClass: class, SMSharingClass: class}); err != nil || !equality.Semantic.DeepEqual(stored.Spec.Spec, want.Spec.Spec) {
		t.Errorf("the stored template differs from the computed one (%v):\n%+v\n%+v", err, stored.Spec.Spec, want)
	}
	running := e.waitRunning("kai-llm")
	claim := e.claimOf(running)
	var gpus []resourceapi.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		gpus = append(gpus, e.device(node.Name, r.Device))
	}
	checkShare(t, record(t, node, e.ns, "kai-llm").Containers[0], gpus, 20*1024, 30*1024)

	_, err = e.client.CoreV1().Pods(e.ns).Create(e.ctx, kaiPod("kai-bad", node.Name, map[string]string{"gpu-memory": "lots"}), metav1.CreateOptions{})
	want := `annotation gpu-memory="lots": failed to parse gpu memory annotation value: must be a whole number of MiB`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("invalid pod: got %v, want a refusal containing %q", err, want)
	}
}

// TestKAIDryRunCreatesNothing: a dry-run create of a KAI pod comes back
// translated, and nothing is created: no pod, no template, no Event.
func TestKAIDryRunCreatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.node("h200x2")
	e.startWebhook(e.classFor("kai-dry", ""))
	out, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, kaiPod("dry", "", map[string]string{"gpu-fraction": "0.5"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || out.Annotations[kai.AnnotationTranslated] == "" {
		t.Fatalf("dry run: %v %v", out, err)
	}
	// The loop reacts within milliseconds to a real pod; give it far more.
	time.Sleep(3 * time.Second)
	tmpls, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).List(e.ctx, metav1.ListOptions{})
	if err != nil || len(tmpls.Items) != 0 {
		t.Errorf("a dry run left templates: %v %v", tmpls, err)
	}
	evs, _ := e.client.CoreV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
	if len(e.pods()) != 0 || len(evs.Items) != 0 {
		t.Errorf("a dry run left %d pods and %d events", len(e.pods()), len(evs.Items))
	}
}

// TestKAITemplateLatency measures what asynchronous template creation adds
// to a pod's start: the time from the pod's create to its ResourceClaim
// (made by the controller-manager from the template), for pods whose
// template the controller's loop must create first, against pods whose
// template already exists, interleaved. It prints a table and asserts only
// that every pod got its claim.
func TestKAITemplateLatency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.node("h200x2")
	e.startWebhook(e.classFor("kai-lat", ""))
	const n = 10
	var fresh, existing []time.Duration
	claimAfter := func(name string, annotations map[string]string) time.Duration {
		// Not placed anywhere: only the claim's creation is timed.
		p := kaiPod(name, "no-such-node", annotations)
		start := time.Now()
		created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A watch, not a poll: a poll's interval would hide the difference.
		w, err := e.client.CoreV1().Pods(e.ns).Watch(e.ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: created.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		timeout := time.After(waitTimeout)
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					t.Fatalf("watch of %s ended", name)
				}
				if got, isPod := ev.Object.(*v1.Pod); isPod && len(got.Status.ResourceClaimStatuses) == 1 && got.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
					return time.Since(start)
				}
			case <-timeout:
				t.Fatalf("pod %s got no claim", name)
			}
		}
	}
	for i := range n {
		a := map[string]string{"gpu-memory": fmt.Sprint(1000 + i)}
		fresh = append(fresh, claimAfter(fmt.Sprintf("fresh-%d", i), a))
		existing = append(existing, claimAfter(fmt.Sprintf("existing-%d", i), a))
	}
	slices.Sort(fresh)
	slices.Sort(existing)
	t.Logf("pod create -> ResourceClaim, %d pods each, interleaved\n%-28s %8s %8s\n%-28s %8s %8s\n%-28s %8s %8s\nratio p50 %.2f",
		n, "template", "p50", "max",
		"created by the loop", fresh[n/2].Round(time.Millisecond), fresh[n-1].Round(time.Millisecond),
		"existing (baseline)", existing[n/2].Round(time.Millisecond), existing[n-1].Round(time.Millisecond),
		float64(fresh[n/2])/float64(existing[n/2]))
}
