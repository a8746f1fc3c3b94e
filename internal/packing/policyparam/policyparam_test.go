// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package policyparam_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpufrac/gpufrac/internal/packing/policyparam"
)

func template(ns, name, class, memory string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class}}
	if memory != "" {
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	t := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	t.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{req}
	return t
}

func gpufracClass(name string) bool { return strings.HasSuffix(name, "gpufrac.dev") }

func TestData(t *testing.T) {
	firstAvailable := template("team", "either", "", "")
	firstAvailable.Spec.Spec.Devices.Requests[0].Exactly = nil
	firstAvailable.Spec.Spec.Devices.Requests[0].FirstAvailable = []resourceapi.DeviceSubRequest{
		{Name: "nvidia", DeviceClassName: "gpu.nvidia.com"},
		{Name: "share", DeviceClassName: "gpufrac.dev", Capacity: &resourceapi.CapacityRequirements{
			Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("8Gi")}}},
	}
	long := template("team", strings.Repeat("x", 250), "gpufrac.dev", "8Gi")
	for _, tc := range []struct {
		name      string
		templates []*resourceapi.ResourceClaimTemplate
		want      []string
		left      int
	}{
		{name: "none"},
		{name: "a fraction", templates: []*resourceapi.ResourceClaimTemplate{template("team", "llm", "gpufrac.dev", "16Gi")}, want: []string{"team.llm"}},
		{name: "a whole GPU is not listed", templates: []*resourceapi.ResourceClaimTemplate{template("team", "train", "gpufrac.dev", "")}},
		{name: "another driver's class is not listed", templates: []*resourceapi.ResourceClaimTemplate{template("team", "nv", "gpu.nvidia.com", "16Gi")}},
		{name: "a fraction among firstAvailable", templates: []*resourceapi.ResourceClaimTemplate{firstAvailable}, want: []string{"team.either"}},
		{name: "keys in order, namespaces apart", templates: []*resourceapi.ResourceClaimTemplate{
			template("b", "llm", "sm-sharing.gpufrac.dev", "8Gi"), template("a", "llm", "gpufrac.dev", "8Gi")}, want: []string{"a.llm", "b.llm"}},
		{name: "a key over 253 characters is left to the webhook", templates: []*resourceapi.ResourceClaimTemplate{long, template("team", "llm", "gpufrac.dev", "16Gi")},
			want: []string{"team.llm"}, left: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, left := policyparam.Data(tc.templates, gpufracClass)
			if got := slices.Sorted(maps.Keys(data)); !slices.Equal(got, tc.want) || left != tc.left {
				t.Errorf("Data = %v (left %d), want %v (left %d)", got, left, tc.want, tc.left)
			}
			for k, v := range data {
				if v != "" {
					t.Errorf("key %s has value %q, want empty", k, v)
				}
			}
		})
	}
}

// TestDataStopsAtMaxBytes: a ConfigMap cannot hold more than 1 MiB; the
// keys past MaxBytes are left out, the same ones whatever the order the
// templates come in.
func TestDataStopsAtMaxBytes(t *testing.T) {
	var templates []*resourceapi.ResourceClaimTemplate
	name := strings.Repeat("t", 200)
	n := policyparam.MaxBytes/(len(name)+len("team-0000.")) + 50
	for i := range n {
		templates = append(templates, template(fmt.Sprintf("team-%04d", i), name, "gpufrac.dev", "8Gi"))
	}
	data, left := policyparam.Data(templates, gpufracClass)
	size := 0
	for k := range data {
		size += len(k)
	}
	if size > policyparam.MaxBytes || left == 0 || len(data)+left != n {
		t.Fatalf("%d keys of %d bytes listed, %d left, of %d: want at most %d bytes and the rest left", len(data), size, left, n, policyparam.MaxBytes)
	}
	slices.Reverse(templates)
	again, _ := policyparam.Data(templates, gpufracClass)
	if !maps.Equal(data, again) {
		t.Error("the keys listed depend on the order of the templates")
	}
}

// TestLoopKeepsTheParameter: the loop creates the ConfigMap, follows
// templates and classes coming and going, and puts back an edited one.
func TestLoopKeepsTheParameter(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	class := func(name, driver string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + driver + `"`}}}}}
	}
	client := fake.NewClientset(class("frac", "gpufrac.dev"), class("nv", "gpu.nvidia.com"),
		template("team", "llm", "frac", "16Gi"), template("team", "whole", "frac", ""), template("team", "nv", "nv", "16Gi"))
	param := types.NamespacedName{Namespace: "gpufrac-system", Name: "gpufrac-packing"}
	factory := informers.NewSharedInformerFactory(client, 0)
	loop, err := policyparam.New(factory, client, param)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	done := make(chan struct{})
	go func() { loop.Run(ctx); close(done) }()
	defer func() {
		cancel()
		<-done
		factory.Shutdown()
	}()

	waitKeys := func(want ...string) {
		t.Helper()
		var got []string
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			cm, err := client.CoreV1().ConfigMaps(param.Namespace).Get(ctx, param.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = slices.Sorted(maps.Keys(cm.Data))
			return slices.Equal(got, want), nil
		})
		if err != nil {
			t.Fatalf("parameter keys %v, want %v", got, want)
		}
	}
	waitKeys("team.llm")

	if _, err := client.ResourceV1().ResourceClaimTemplates("lab").Create(ctx, template("lab", "small", "frac", "4Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeys("lab.small", "team.llm")

	if err := client.ResourceV1().ResourceClaimTemplates("team").Delete(ctx, "llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeys("lab.small")

	// The class "nv" now selects gpufrac devices: its template asks for a
	// fraction of them.
	if _, err := client.ResourceV1().DeviceClasses().Update(ctx, class("nv", "gpufrac.dev"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeys("lab.small", "team.nv")

	// Someone edits the parameter: the next sync (here, one a template
	// change brings) puts it back.
	cm, err := client.CoreV1().ConfigMaps(param.Namespace).Get(ctx, param.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"team.whole": ""}
	if _, err := client.CoreV1().ConfigMaps(param.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates("lab").Create(ctx, template("lab", "train", "frac", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeys("lab.small", "team.nv")

	// A hand edit with nothing else changing is put right at once: the
	// loop watches the ConfigMap (issue 34: it was put right only by the
	// next 5-minute resync).
	cm, err = client.CoreV1().ConfigMaps(param.Namespace).Get(ctx, param.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"kube-system.anything": ""}
	if _, err := client.CoreV1().ConfigMaps(param.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeys("lab.small", "team.nv")
	// So is a deleted one.
	if err := client.CoreV1().ConfigMaps(param.Namespace).Delete(ctx, param.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitKeys("lab.small", "team.nv")
	writes := func() int {
		n := 0
		for _, a := range client.Actions() {
			if a.GetResource().Resource == "configmaps" && (a.GetVerb() == "update" || a.GetVerb() == "create") {
				n++
			}
		}
		return n
	}
	before := writes()
	if err := loop.Sync(ctx); err != nil {
		t.Fatalf("Sync with nothing to change: %v", err)
	}
	if after := writes(); after != before {
		t.Errorf("Sync with nothing to change wrote the ConfigMap %d times", after-before)
	}
}
