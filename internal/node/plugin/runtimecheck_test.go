// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/core/resourceslices"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// A node whose NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES from
// unprivileged containers (the key unset: NVIDIA's default) says so on
// every device of its slices and with a Warning Event on the Node; one
// that refuses it says so on its devices and raises no Event; a plugin
// not given the file says unknown.
func TestNodeReportsARuntimeThatAcceptsVisibleDevicesFromPods(t *testing.T) {
	for _, tc := range []struct {
		name, config string
		given        bool
		want         domain.VisibleDevicesEnvvar
		event        bool
	}{
		{name: "unset", config: "[nvidia-container-runtime]\nmode = \"auto\"\n", given: true, want: domain.VisibleDevicesEnvvarAccepted, event: true},
		{name: "true", config: "accept-nvidia-visible-devices-envvar-when-unprivileged = true\n", given: true, want: domain.VisibleDevicesEnvvarAccepted, event: true},
		{name: "false", config: "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n", given: true, want: domain.VisibleDevicesEnvvarRefused},
		{name: "not given", want: domain.VisibleDevicesEnvvarUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
			cfg := simNodeConfig(t, client)
			if tc.given {
				cfg.NVIDIARuntimeConfig = filepath.Join(t.TempDir(), "config.toml")
				if err := os.WriteFile(cfg.NVIDIARuntimeConfig, []byte(tc.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			slices, err := nodeplugin.Slices(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range slices {
				for _, d := range s.Spec.Devices {
					a := d.Attributes[resourceslices.AttrNVIDIAVisibleDevicesEnvvar]
					if a.StringValue == nil || *a.StringValue != string(tc.want) {
						t.Errorf("device %s: %s = %v, want %s", d.Name, resourceslices.AttrNVIDIAVisibleDevicesEnvvar, a.StringValue, tc.want)
					}
				}
			}
			plugin, err := nodeplugin.Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer plugin.Stop()
			var event *eventsv1.Event
			poll := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 3*time.Second, true, func(ctx context.Context) (bool, error) {
				list, err := client.EventsV1().Events("").List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				for i := range list.Items {
					if list.Items[i].Reason == nodeplugin.EventVisibleDevicesEnvvarAccepted {
						event = &list.Items[i]
					}
				}
				return event != nil, nil
			})
			if !tc.event {
				if event != nil {
					t.Errorf("a %s node got the Event %q", tc.want, event.Note)
				}
				return
			}
			if poll != nil {
				t.Fatalf("no %s Event on the Node: %v", nodeplugin.EventVisibleDevicesEnvvarAccepted, poll)
			}
			if event.Type != v1.EventTypeWarning || event.Regarding.Kind != "Node" || event.Regarding.Name != nodeName ||
				!strings.Contains(event.Note, cfg.NVIDIARuntimeConfig) || !strings.Contains(event.Note, "NVIDIA_VISIBLE_DEVICES") {
				t.Errorf("event %s %s regarding %+v: %q", event.Type, event.Reason, event.Regarding, event.Note)
			}
		})
	}
}
