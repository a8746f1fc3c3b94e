// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package deployments_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/deployments"
)

// TestDeviceClassObjects: the embedded DeviceClasses parse into the two
// classes gpufrac ships, and the webhooks file is embedded whole.
func TestDeviceClassObjects(t *testing.T) {
	classes, err := deployments.DeviceClassObjects()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range classes {
		names = append(names, c.Name)
		if c.Kind != "DeviceClass" || len(c.Spec.Selectors) == 0 {
			t.Errorf("class %s: kind %q, %d selectors", c.Name, c.Kind, len(c.Spec.Selectors))
		}
	}
	if !slices.Equal(names, []string{"gpufrac.dev", "sm-sharing.gpufrac.dev", "mig.gpufrac.dev"}) {
		t.Errorf("DeviceClasses %v", names)
	}
	for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration", "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"} {
		if !strings.Contains(deployments.Webhooks, "kind: "+kind+"\n") {
			t.Errorf("Webhooks has no %s", kind)
		}
	}
}
