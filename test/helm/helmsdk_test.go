package helm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// helmClient runs Helm SDK actions through internal/helmrun, a process of
// its own (see there why).
type helmClient struct {
	bin, dir  string
	namespace string
}

// helmRelease is what helmrun prints.
type helmRelease struct {
	Name        string `json:"name"`
	Revision    int    `json:"revision"`
	Status      string `json:"status"`
	Description string `json:"description"`
}

func newHelmClient(t *testing.T, namespace string) *helmClient {
	t.Helper()
	dir := filepath.Join(cp.Dir, "helmrun")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helmrun")
	cmd := exec.Command("go", "build", "-o", bin, "./internal/helmrun")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building internal/helmrun: %v\n%s", err, out)
	}
	return &helmClient{bin: bin, dir: dir, namespace: namespace}
}

func (h *helmClient) run(ctx context.Context, action, name string, values map[string]any, extra ...string) (*helmRelease, error) {
	args := []string{"-kubeconfig", cp.Kubeconfig, "-namespace", h.namespace, "-release", name, "-action", action,
		"-timeout", helmTimeout.String()}
	if values != nil {
		raw, err := json.Marshal(values)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(h.dir, action+"-values.json")
		if err := os.WriteFile(file, raw, 0o644); err != nil {
			return nil, err
		}
		args = append(args, "-chart", chartDir, "-values", file)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, h.bin, append(args, extra...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var rel helmRelease
	if err := json.Unmarshal(stdout.Bytes(), &rel); err != nil {
		return nil, fmt.Errorf("helmrun printed %q: %w", stdout.String(), err)
	}
	return &rel, nil
}

func (h *helmClient) install(ctx context.Context, name string, values map[string]any) (*helmRelease, error) {
	return h.run(ctx, "install", name, values)
}

func (h *helmClient) upgrade(ctx context.Context, name string, values map[string]any) (*helmRelease, error) {
	return h.run(ctx, "upgrade", name, values)
}

func (h *helmClient) rollback(ctx context.Context, name string, revision int) (*helmRelease, error) {
	return h.run(ctx, "rollback", name, nil, "-revision", strconv.Itoa(revision))
}

func (h *helmClient) uninstall(ctx context.Context, name string) error {
	_, err := h.run(ctx, "uninstall", name, nil)
	return err
}
