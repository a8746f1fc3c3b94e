// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package webhookcert_test

import (
	"strconv"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// optimistic makes the fake clientset refuse an update whose
// resourceVersion is not the object's current one, as the API server does
// (the fake's tracker keeps no resource versions): replicas that race must
// meet the same conflicts as on a real cluster.
func optimistic(client *fake.Clientset) *fake.Clientset {
	var mu sync.Mutex
	versions := map[string]int{}
	key := func(gvr schema.GroupVersionResource, ns, name string) string {
		return gvr.String() + "/" + ns + "/" + name
	}
	client.PrependReactor("get", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		get := action.(k8stesting.GetAction)
		obj, err := client.Tracker().Get(get.GetResource(), get.GetNamespace(), get.GetName())
		if err != nil {
			return true, nil, err
		}
		obj = obj.DeepCopyObject()
		m, _ := meta.Accessor(obj)
		mu.Lock()
		m.SetResourceVersion(strconv.Itoa(versions[key(get.GetResource(), get.GetNamespace(), get.GetName())]))
		mu.Unlock()
		return true, obj, nil
	})
	client.PrependReactor("update", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		update := action.(k8stesting.UpdateAction)
		if update.GetSubresource() != "" {
			return false, nil, nil
		}
		obj := update.GetObject().DeepCopyObject()
		m, _ := meta.Accessor(obj)
		k := key(update.GetResource(), update.GetNamespace(), m.GetName())
		mu.Lock()
		defer mu.Unlock()
		if m.GetResourceVersion() != strconv.Itoa(versions[k]) {
			return true, nil, apierrors.NewConflict(update.GetResource().GroupResource(), m.GetName(), nil)
		}
		versions[k]++
		m.SetResourceVersion(strconv.Itoa(versions[k]))
		if err := client.Tracker().Update(update.GetResource(), obj, update.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	return client
}
