// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/ociimage"
)

// NodeImage is the only image of the real node, imported into containerd
// (no registry): its entrypoint /pause is the pod sandbox, /probe prints what
// a container sees (test/e2e/e2e-probe), and nvidia-cuda-mps-control and
// nvidia-smi are the MPS double (test/mpsdouble), /fakecuda its CUDA
// client (test/fakecuda), with a shell and the few
// tools the MPS daemon template's script runs, copied from the host with
// their shared libraries.
const NodeImage = "gpufrac.dev/e2e:v1"

// shellTools are what templates/mps-control-daemon.yaml's script and probes
// run besides the shell's builtins.
var shellTools = kubebuild.ShellTools

// buildNodeImage writes the image's OCI archive into dir.
func buildNodeImage(ctx context.Context, p *kubebuild.Progress, repoRoot, dir string) (string, error) {
	binDir := filepath.Join(dir, "image-bin")
	env := []string{"CGO_ENABLED=0", "GOWORK=off"}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "CGO_ENABLED", "GOWORK":
			continue
		}
		env = append(env, kv)
	}
	if err := p.Run(ctx, "Building the node image's programs (test/e2e/e2e-probe, test/mpsdouble, test/fakecuda, gpufrac-mps-launcher)", repoRoot, env,
		"go", "build", "-o", binDir+"/", "./test/e2e/e2e-probe", "./test/mpsdouble", "./test/fakecuda", "./cmd/gpufrac-mps-launcher"); err != nil {
		return "", err
	}
	probe, err := os.ReadFile(filepath.Join(binDir, "e2e-probe"))
	if err != nil {
		return "", err
	}
	mps, err := os.ReadFile(filepath.Join(binDir, "mpsdouble"))
	if err != nil {
		return "", err
	}
	fakeCUDA, err := os.ReadFile(filepath.Join(binDir, "fakecuda"))
	if err != nil {
		return "", err
	}
	launcher, err := os.ReadFile(filepath.Join(binDir, kubebuild.LauncherName))
	if err != nil {
		return "", err
	}
	img := ociimage.Image{
		Name:       NodeImage,
		Entrypoint: []string{"/pause"},
		Env:        []string{"PATH=/usr/bin:/bin"},
		Dirs:       []string{"/tmp", "/etc", "/proc", "/sys", "/dev", "/var/log"},
		Files: []ociimage.File{
			{Path: "/pause", Mode: 0o755, Data: probe},
			{Path: "/probe", Mode: 0o755, Data: probe},
			// The plugin image's launcher: the MPS daemon Pods run the
			// driver root's nvidia-cuda-mps-control (the double, put there
			// by AddRealNode) through it, never a binary of this image.
			{Path: "/usr/local/bin/gpufrac-mps-launcher", Mode: 0o755, Data: launcher},
			// fakecuda's own checks and test pods that call the double
			// directly; the daemon never runs these.
			{Path: "/usr/bin/nvidia-cuda-mps-control", Mode: 0o755, Data: mps},
			{Path: "/usr/bin/nvidia-smi", Mode: 0o755, Data: mps},
			// A CUDA program: an MPS client of the double's memory ledger.
			{Path: "/fakecuda", Mode: 0o755, Data: fakeCUDA},
		},
	}
	host, err := hostTools(ctx, shellTools)
	if err != nil {
		return "", err
	}
	img.Files = append(img.Files, host...)
	archive := filepath.Join(dir, "e2e-image.tar")
	var buf bytes.Buffer
	if err := ociimage.Write(&buf, img, runtime.GOARCH); err != nil {
		return "", err
	}
	return archive, os.WriteFile(archive, buf.Bytes(), 0o644)
}

// hostTools copies host programs into /bin of the image, with their
// shared libraries (kubebuild.HostTools).
func hostTools(ctx context.Context, names []string) ([]ociimage.File, error) {
	host, err := kubebuild.HostTools(ctx, names)
	if err != nil {
		return nil, err
	}
	files := make([]ociimage.File, 0, len(host))
	for _, f := range host {
		files = append(files, ociimage.File{Path: f.Path, Mode: int64(f.Mode), Data: f.Data})
	}
	return files, nil
}

func sharedLibraries(ctx context.Context, path string) ([]string, error) {
	return kubebuild.SharedLibraries(ctx, path)
}
