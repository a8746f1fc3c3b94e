package helm

import (
	"context"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// helmTimeout bounds each Helm action's wait for its pods.
const helmTimeout = 4 * time.Minute

// helmClient runs Helm's actions (what `helm install/upgrade/rollback/
// uninstall --wait` run) against the harness's API server as its admin.
type helmClient struct {
	cfg       *action.Configuration
	namespace string
}

func newHelmClient(t *testing.T, namespace string) *helmClient {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &cp.Kubeconfig
	flags.Namespace = &namespace
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, namespace, "secret", func(string, ...any) {}); err != nil {
		t.Fatalf("initialising Helm: %v", err)
	}
	return &helmClient{cfg: cfg, namespace: namespace}
}

func (h *helmClient) install(ctx context.Context, name string, ch *chart.Chart, values map[string]any) (*release.Release, error) {
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace, in.CreateNamespace = name, h.namespace, true
	in.Wait, in.Timeout = true, helmTimeout
	return in.RunWithContext(ctx, ch, values)
}

func (h *helmClient) upgrade(ctx context.Context, name string, ch *chart.Chart, values map[string]any) (*release.Release, error) {
	up := action.NewUpgrade(h.cfg)
	up.Namespace = h.namespace
	up.Wait, up.Timeout = true, helmTimeout
	return up.RunWithContext(ctx, name, ch, values)
}

func (h *helmClient) rollback(name string, revision int) error {
	rb := action.NewRollback(h.cfg)
	rb.Version = revision
	rb.Wait, rb.Timeout = true, helmTimeout
	return rb.Run(name)
}

func (h *helmClient) uninstall(name string) error {
	un := action.NewUninstall(h.cfg)
	un.Wait, un.Timeout = true, helmTimeout
	_, err := un.Run(name)
	return err
}

func (h *helmClient) status(name string) (*release.Release, error) {
	return action.NewStatus(h.cfg).Run(name)
}
