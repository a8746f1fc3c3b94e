// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package podterms

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	resourcelisters "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
)

// InformerClaims serves ClaimSpecs: templates from an informer cache (few,
// and named by every pod that uses them), asking the API server only on a
// miss (a template applied together with its pods may not have reached the
// cache yet); ResourceClaims, which pods rarely name directly, from the API
// server. Watching every ResourceClaim would cost the controller and the
// API server an event per claim create and status update: measured at
// 1,000 nodes, that slowed pod admission threefold on a busy machine.
type InformerClaims struct {
	client    kubernetes.Interface
	templates resourcelisters.ResourceClaimTemplateLister
	synced    []cache.InformerSynced
}

// NewInformerClaims registers the informers it needs with factory; start
// the factory and call WaitForSync before serving.
func NewInformerClaims(factory informers.SharedInformerFactory, client kubernetes.Interface) *InformerClaims {
	t := factory.Resource().V1().ResourceClaimTemplates()
	return &InformerClaims{client: client, templates: t.Lister(), synced: []cache.InformerSynced{t.Informer().HasSynced}}
}

// WaitForSync blocks until the caches are filled.
func (c *InformerClaims) WaitForSync(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("waiting for the ResourceClaimTemplate cache: %w", ctx.Err())
	}
	return nil
}

// TemplateSpec implements ClaimSpecs.
func (c *InformerClaims) TemplateSpec(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimSpec, bool) {
	t, err := c.templates.ResourceClaimTemplates(namespace).Get(name)
	if err != nil && c.client != nil {
		t, err = c.client.ResourceV1().ResourceClaimTemplates(namespace).Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, false
	}
	return &t.Spec.Spec, true
}

// ClaimSpec implements ClaimSpecs.
func (c *InformerClaims) ClaimSpec(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaimSpec, bool) {
	if c.client == nil {
		return nil, false
	}
	rc, err := c.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	return &rc.Spec, true
}
