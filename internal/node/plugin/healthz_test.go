// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plugin_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/metricsserver"
	nodeplugin "github.com/gpufrac/gpufrac/internal/node/plugin"
)

// TestHealthzFailsWhenDRASocketIsGone: the liveness endpoint the chart
// probes answers ok while the plugin's sockets answer, and fails once the
// DRA socket the registration names is gone (the kubelet could no longer
// prepare anything), naming the socket.
func TestHealthzFailsWhenDRASocketIsGone(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cfg := simNodeConfig(t, fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}))
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer plugin.Stop()
	addr, stopped, err := metricsserver.StartWithChecks(ctx, "127.0.0.1:0", prometheus.NewRegistry(),
		metricsserver.Checks{Healthz: func() error { return plugin.Healthz(ctx) }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-stopped }()
	probe := func() (int, string) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := probe(); code != http.StatusOK {
		t.Fatalf("a healthy plugin: /healthz %d %s", code, body)
	}

	draSock := filepath.Join(cfg.PluginDataDir, "dra.sock")
	if err := os.Remove(draSock); err != nil {
		t.Fatalf("removing the DRA socket: %v", err)
	}
	// A check's answer is reused for metricsserver's probe interval (1 s).
	code, body := probe()
	for deadline := time.Now().Add(10 * time.Second); code == http.StatusOK && time.Now().Before(deadline); code, body = probe() {
		time.Sleep(100 * time.Millisecond)
	}
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "DRA socket "+draSock) {
		t.Errorf("without the DRA socket: /healthz %d %q, want 503 naming the socket", code, body)
	}
}

// TestHealthzChecksRegistrationAndCheckpoint: the other two things the
// kubelet and a restart depend on.
func TestHealthzChecksRegistrationAndCheckpoint(t *testing.T) {
	for name, breakIt := range map[string]func(cfg nodeplugin.Config) error{
		"registration socket gone": func(cfg nodeplugin.Config) error {
			return os.Remove(filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock"))
		},
		"checkpoint unreadable": func(cfg nodeplugin.Config) error {
			return os.WriteFile(filepath.Join(cfg.PluginDataDir, nodeplugin.CheckpointFile), []byte(`{"version":1,"checksum":"x"`), 0o600)
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			cfg := simNodeConfig(t, fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}}))
			plugin, err := nodeplugin.Start(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer plugin.Stop()
			if err := plugin.Healthz(ctx); err != nil {
				t.Fatalf("healthy plugin: %v", err)
			}
			if err := breakIt(cfg); err != nil {
				t.Fatal(err)
			}
			if err := plugin.Healthz(ctx); err == nil {
				t.Error("Healthz passed")
			} else {
				t.Logf("Healthz: %v", err)
			}
		})
	}
}
