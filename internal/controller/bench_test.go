// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/admission"
	"github.com/gpufrac/gpufrac/internal/admission/webhookcert"
	"github.com/gpufrac/gpufrac/internal/controller"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
)

// BenchmarkWebhookTranslation measures what a KAI-annotated pod's create
// pays for admission, three ways interleaved in each iteration so that
// load on the machine hits them alike:
//
//   - translate: kai.Translate alone, the translation itself;
//   - inprocess: the mutating handler called directly (AdmissionReview
//     decoding, translation, the JSON patch; the template is created later
//     by the controller's loop, not in admission);
//   - https: the same request posted to the controller started as the
//     binary starts it (controller.Run: informer caches, the webhookcert
//     self-signed certificate, TLS), over a kept-alive HTTP/2 connection
//     as the API server's webhook client keeps one.
//
// It reports p50 and p99 of each and the ratio https/inprocess, which is
// the cost of the transport the API server adds.
func BenchmarkWebhookTranslation(b *testing.B) {
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
	defer cancel()
	client := fake.NewClientset(h200Slice())

	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, controller.Config{
			Client: client, WebhookAddress: "127.0.0.1:0",
			Cert:  webhookcert.Config{Namespace: "gpufrac-system", SecretName: "tls", ServiceName: "gpufrac-webhook"},
			Ready: func(addr string) { ready <- addr },
		})
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		b.Fatalf("controller stopped: %v", err)
	case <-time.After(60 * time.Second):
		b.Fatal("controller never served")
	}
	httpClient := trustingClient(ctx, b, client)

	// The in-process handler is built as controller.Run builds its own:
	// the informer-backed cluster view and the event recorder.
	factory := informers.NewSharedInformerFactory(client, 0)
	cluster := admission.NewInformerCluster(factory)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if err := cluster.WaitForSync(ctx); err != nil {
		b.Fatal(err)
	}
	handler := (&admission.Server{Cluster: cluster}).Handler()
	sizes := cluster.GPUMemorySizes()

	n := b.N
	translate := make([]time.Duration, n)
	inprocess := make([]time.Duration, n)
	overHTTPS := make([]time.Duration, n)
	b.ResetTimer()
	for i := range n {
		pod := kaiPod(fmt.Sprintf("llm-%d", i))
		start := time.Now()
		if res, err := kai.Translate(pod, kai.Options{GPUMemorySizes: sizes}); err != nil || res == nil {
			b.Fatalf("translate: %v", err)
		}
		translate[i] = time.Since(start)

		body := admissionBody(b, pod, i)
		rec := httptest.NewRecorder()
		req := httptest.NewRequestWithContext(ctx, http.MethodPost, admission.PathMutatePods, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		start = time.Now()
		handler.ServeHTTP(rec, req)
		inprocess[i] = time.Since(start)
		checkPatched(b, rec.Body.Bytes())

		start = time.Now()
		resp, err := httpClient.Post("https://"+addr+admission.PathMutatePods, "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		out, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		overHTTPS[i] = time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		checkPatched(b, out)
	}
	b.StopTimer()

	p50, p99 := map[string]time.Duration{}, map[string]time.Duration{}
	for name, d := range map[string][]time.Duration{"translate": translate, "inprocess": inprocess, "https": overHTTPS} {
		slices.Sort(d)
		p50[name], p99[name] = d[n/2], d[n*99/100]
		b.ReportMetric(micros(p50[name]), name+"-p50-µs")
		b.ReportMetric(micros(p99[name]), name+"-p99-µs")
	}
	b.ReportMetric(float64(p50["https"])/float64(p50["inprocess"]), "https/inprocess-p50")
	b.ReportMetric(float64(p99["https"])/float64(p99["inprocess"]), "https/inprocess-p99")
	cancel()
	if err := <-done; err != nil {
		b.Errorf("controller shutdown: %v", err)
	}
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// h200Slice is one node's slice as far as admission reads it: a gpufrac
// GPU with the H200's memory, so gpu-fraction has a size to apply to.
func h200Slice() *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "node-000-gpufrac.dev"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: v1alpha1.DriverName, NodeName: ptr.To("node-000"),
			Pool: resourceapi.ResourcePool{Name: "node-000", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "gpu-0", Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: resource.MustParse("141Gi")},
			}}},
		},
	}
}

// kaiPod is a typical inference pod asking KAI-style for half a GPU.
func kaiPod(name string) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team", Labels: map[string]string{"app": "llm"},
			Annotations: map[string]string{kai.AnnotationFraction: "0.5"}},
		Spec: corev1.PodSpec{
			SchedulerName: "kai-scheduler",
			Containers: []corev1.Container{{
				Name: "server", Image: "vllm/vllm-openai:v0.11.0", Args: []string{"--model", "Qwen/Qwen3-8B"},
				Ports: []corev1.ContainerPort{{ContainerPort: 8000}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("32Gi")}},
			}},
		},
	}
}

// admissionBody is the AdmissionReview the API server posts for a pod
// create: kind, resource, user and options as well as the object.
func admissionBody(b *testing.B, pod *corev1.Pod, i int) []byte {
	raw, err := json.Marshal(pod)
	if err != nil {
		b.Fatal(err)
	}
	opts, _ := json.Marshal(metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}})
	gvk := metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvr := metav1.GroupVersionResource{Version: "v1", Resource: "pods"}
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID: types.UID(fmt.Sprintf("req-%d", i)), Kind: gvk, Resource: gvr, RequestKind: &gvk, RequestResource: &gvr,
			Name: pod.Name, Namespace: pod.Namespace, Operation: admissionv1.Create,
			UserInfo: authenticationv1.UserInfo{Username: "system:serviceaccount:kube-system:replicaset-controller",
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"}},
			Object: runtime.RawExtension{Raw: raw}, Options: runtime.RawExtension{Raw: opts}, DryRun: ptr.To(false),
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return body
}

func checkPatched(b *testing.B, body []byte) {
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &out); err != nil {
		b.Fatalf("response %q: %v", body, err)
	}
	if out.Response == nil || !out.Response.Allowed || len(out.Response.Patch) == 0 {
		b.Fatalf("the pod was not translated: %s", body)
	}
}

// trustingClient trusts only the certificate the controller stored, as the
// API server does through the CA bundle, and keeps its connection alive.
func trustingClient(ctx context.Context, b *testing.B, client *fake.Clientset) *http.Client {
	secret, err := client.CoreV1().Secrets("gpufrac-system").Get(ctx, "tls", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(secret.Data[corev1.TLSCertKey])
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: "gpufrac-webhook.gpufrac-system.svc", MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}}
}
