package integration

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpufrac/gpufrac/pkg/kai"
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
// real API server: the running webhook translates them, the
// controller-manager creates their claims from the translated templates, the
// scheduler allocates them, and the pod runs with the memory the annotations
// asked for; an invalid pod is refused with the annotation and the rule.
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
	created, err := e.client.CoreV1().Pods(e.ns).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the annotated pod: %v", err)
	}
	if len(created.Spec.ResourceClaims) != 1 || created.Annotations[kai.AnnotationTranslated] == "" {
		t.Fatalf("the pod was not translated: claims %+v, annotations %v", created.Spec.ResourceClaims, created.Annotations)
	}
	tmplName := *created.Spec.ResourceClaims[0].ResourceClaimTemplateName
	if _, err := e.client.ResourceV1().ResourceClaimTemplates(e.ns).Get(e.ctx, tmplName, metav1.GetOptions{}); err != nil {
		t.Errorf("the translated template %s is not in the namespace: %v", tmplName, err)
	}
	running := e.waitRunning("kai-llm")
	claim := e.claimOf(running)
	var gpus []resourceapi.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		gpus = append(gpus, e.device(node.Name, r.Device))
	}
	checkShare(t, record(t, node, e.ns, "kai-llm").Containers[0], gpus, 20*1024, 30*1024)

	_, err = e.client.CoreV1().Pods(e.ns).Create(e.ctx, kaiPod("kai-bad", node.Name, map[string]string{"gpu-memory": "lots"}), metav1.CreateOptions{})
	want := `annotation gpu-memory="lots": must be a positive whole number of MiB`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("invalid pod: got %v, want a refusal containing %q", err, want)
	}
}
