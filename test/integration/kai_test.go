package integration

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/cert"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/pkg/controller"
	"github.com/gpufrac/gpufrac/pkg/kai"
)

// startWebhook runs gpufrac-controller's admission server against the real
// API server and registers it for this test's namespace only, failing
// closed, as the reference configuration does for migrated namespaces.
func (e *env) startWebhook(class string) {
	e.t.Helper()
	certPEM, keyPEM, err := cert.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	dir := e.t.TempDir()
	for name, data := range map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(e.ctx)
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, controller.Config{
			Client: cp.Client, WebhookAddress: "127.0.0.1:0", CertDir: dir,
			KAI:   kai.Options{TimeSlicingClass: class, SMSharingClass: class},
			Ready: func(addr string) { ready <- addr },
		})
	}()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("controller: %v", err)
		}
	})
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		e.t.Fatalf("controller stopped: %v", err)
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: e.ns + "-kai"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "kai.pods.gpufrac.dev",
			AdmissionReviewVersions: []string{"v1"},
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + addr + "/mutate-pods"), CABundle: certPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
			}},
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.ns}},
		}},
	}
	if _, err := cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(e.ctx, mwc, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		_ = cp.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Delete(context.WithoutCancel(e.ctx), mwc.Name, metav1.DeleteOptions{})
	})
	// The API server picks webhook configurations up asynchronously: wait
	// until a dry-run of an invalid pod is refused by the webhook.
	probe := kaiPod("probe", "", map[string]string{"gpu-fraction": "2"})
	e.poll("the webhook to be called", func() (bool, error) {
		_, err := cp.Client.CoreV1().Pods(e.ns).Create(e.ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "cannot translate KAI GPU-sharing annotations"), nil
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
