package plugin

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpufrac/gpufrac/internal/node/preparer"
)

// podGetter lets Prepare read the pods a claim is reserved for (one
// guarantee per claim); nil without a client.
func podGetter(client kubernetes.Interface) preparer.PodGetter {
	if client == nil {
		return nil
	}
	return func(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
		return client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	}
}
