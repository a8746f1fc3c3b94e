// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/gpufrac/gpufrac/hack/hostbin"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/hack/ociimage"
	"github.com/gpufrac/gpufrac/internal/buildinfo"
)

// The chart's image (deployments/container/Dockerfile), built without a
// container engine: the binaries `make build` builds, at the paths the
// Dockerfile copies them to, on a base made from this host. The Dockerfile's
// base, distroless base-debian12, cannot be pulled here; what the binaries
// need of it is the C library (go-nvml's cgo makes them link glibc
// dynamically) and the nonroot user, so the image takes the host's glibc
// (the shared libraries ldd names for each binary, the dynamic loader
// included) and writes distroless's /etc/passwd and /etc/group entries. The
// image is therefore only as portable as this host's glibc: published images
// come from the Dockerfile. gpufrac-cdi-hook, which runs on the host, is
// built without cgo in both and needs glibc 2.17 or later there
// (hack/hostbin).

// ChartImageRepository is the chart's image.repository.
const ChartImageRepository = "ghcr.io/gpufrac/gpufrac"

// DockerfileImage is what the Dockerfile's final stage puts in the image.
type DockerfileImage struct {
	// Copies maps each binary of the build stage's /out to its path in the
	// image.
	Copies     map[string]string
	Entrypoint []string
	User       string
}

// ParseDockerfile reads the final stage of a Dockerfile: its
// `COPY --from=build /out/<binary> <path>` lines, ENTRYPOINT (exec form) and
// USER.
func ParseDockerfile(file string) (*DockerfileImage, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var img *DockerfileImage
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for line := 1; sc.Scan(); line++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			img = &DockerfileImage{Copies: map[string]string{}}
		case "COPY":
			if img == nil || len(fields) != 4 || fields[1] != "--from=build" || !strings.HasPrefix(fields[2], "/out/") {
				continue
			}
			img.Copies[strings.TrimPrefix(fields[2], "/out/")] = fields[3]
		case "ENTRYPOINT":
			rest := strings.TrimSpace(strings.TrimPrefix(sc.Text(), fields[0]))
			if err := json.Unmarshal([]byte(rest), &img.Entrypoint); err != nil {
				return nil, fmt.Errorf("%s:%d: ENTRYPOINT is not in exec form: %w", file, line, err)
			}
		case "USER":
			if len(fields) == 2 {
				img.User = fields[1]
			}
		}
	}
	if img == nil || len(img.Copies) == 0 {
		return nil, fmt.Errorf("%s: no COPY --from=build /out/<binary> in its final stage", file)
	}
	return img, nil
}

// distrolessUsers are base-debian12's /etc/passwd and /etc/group: root and
// nonroot (65532), whom the controller runs as.
const (
	distrolessPasswd = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	distrolessGroup  = "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n"
)

// ChartImage is the image of the Dockerfile df with the binaries of binDir,
// named ChartImageRepository:tag, and the host's shared libraries they link.
func ChartImage(ctx context.Context, df *DockerfileImage, binDir, tag string) (ociimage.Image, error) {
	img, err := ChartImageBase(df, binDir, tag)
	if err != nil {
		return img, err
	}
	seen := map[string]bool{}
	for _, bin := range slices.Sorted(maps.Keys(df.Copies)) {
		libs, err := sharedLibraries(ctx, filepath.Join(binDir, bin))
		if err != nil {
			return img, err
		}
		for _, lib := range libs {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			data, err := os.ReadFile(lib)
			if err != nil {
				return img, fmt.Errorf("copying the host's %s into the image: %w", lib, err)
			}
			img.Files = append(img.Files, ociimage.File{Path: lib, Mode: 0o755, Data: data})
		}
	}
	return img, nil
}

// ChartImageBase is ChartImage without the C library: distroless's users,
// the image's directories, and the binaries of binDir at the Dockerfile's
// paths. A release's image for another architecture adds that
// architecture's library (hack/release).
func ChartImageBase(df *DockerfileImage, binDir, tag string) (ociimage.Image, error) {
	img := ociimage.Image{
		Name:       ChartImageRepository + ":" + tag,
		Entrypoint: df.Entrypoint,
		User:       df.User,
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Dirs:       []string{"/tmp", "/home/nonroot", "/root", "/proc", "/sys", "/dev"},
		Files: []ociimage.File{
			{Path: "/etc/passwd", Mode: 0o644, Data: []byte(distrolessPasswd)},
			{Path: "/etc/group", Mode: 0o644, Data: []byte(distrolessGroup)},
		},
	}
	for _, bin := range slices.Sorted(maps.Keys(df.Copies)) {
		dest := df.Copies[bin]
		if !path.IsAbs(dest) {
			return img, fmt.Errorf("the Dockerfile copies %s to %q, not an absolute path", bin, dest)
		}
		data, err := os.ReadFile(filepath.Join(binDir, bin))
		if err != nil {
			return img, fmt.Errorf("the Dockerfile copies %s, which the build did not make: %w", bin, err)
		}
		img.Files = append(img.Files, ociimage.File{Path: dest, Mode: 0o755, Data: data})
	}
	return img, nil
}

// BuildChartImage builds every binary of cmd/ (as `make build`, with the
// Dockerfile's -s -w and version stamp) into dir and writes the chart's
// image, tagged tag, as an OCI archive there. It returns the archive and the
// image reference.
func BuildChartImage(ctx context.Context, p *kubebuild.Progress, repoRoot, dir, tag string) (archive, ref string, err error) {
	binDir := filepath.Join(dir, "bin-"+tag)
	env := []string{"CGO_ENABLED=1", "GOWORK=off"}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "CGO_ENABLED", "GOWORK":
			continue
		}
		env = append(env, kv)
	}
	if os.Getenv("CGO_CFLAGS") == "" { // as the Makefile: go-nvml's deprecation warnings
		env = append(env, "CGO_CFLAGS=-Wno-deprecated-declarations")
	}
	if err := p.Run(ctx, "Building ./cmd/... for the chart's image "+tag, repoRoot, env,
		"go", "build", "-ldflags", "-s -w "+buildinfo.LDFlag(tag), "-o", binDir+"/", "./cmd/..."); err != nil {
		return "", "", err
	}
	// The host binaries again, without cgo, as the Dockerfile builds them
	// (the Makefile's HOST_BINARIES): the hook the chart installs on hosts
	// is the cgo-free one. A checkout from before the list has none.
	if hostBins, err := hostbin.HostBinaries(repoRoot); err == nil {
		hostEnv := append([]string{"CGO_ENABLED=0"}, env[1:]...)
		args := []string{"build", "-ldflags", "-s -w " + buildinfo.LDFlag(tag), "-o", binDir + "/"}
		for _, b := range hostBins {
			args = append(args, "./cmd/"+b)
		}
		if err := p.Run(ctx, "Building the host binaries without cgo for the chart's image "+tag, repoRoot, hostEnv, "go", args...); err != nil {
			return "", "", err
		}
	}
	df, err := ParseDockerfile(filepath.Join(repoRoot, "deployments", "container", "Dockerfile"))
	if err != nil {
		return "", "", err
	}
	img, err := ChartImage(ctx, df, binDir, tag)
	if err != nil {
		return "", "", err
	}
	archive = filepath.Join(dir, "gpufrac-"+tag+".tar")
	f, err := os.Create(archive)
	if err != nil {
		return "", "", err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if err := ociimage.Write(w, img, runtime.GOARCH); err != nil {
		_ = f.Close()
		return "", "", err
	}
	if err := w.Flush(); err != nil {
		_ = f.Close()
		return "", "", err
	}
	return archive, img.Name, f.Close()
}

// LoadChartImage builds the chart's image of this checkout tagged tag (see
// BuildChartImage) and imports it into the real node's containerd; it
// returns the image reference and the archive's size.
func (cp *ControlPlane) LoadChartImage(ctx context.Context, n *RealNode, tag string) (ref string, size int64, err error) {
	root, err := kubebuild.RepoRoot()
	if err != nil {
		return "", 0, err
	}
	archive, ref, err := BuildChartImage(ctx, cp.progress, root, filepath.Join(cp.Dir, "chart-images"), tag)
	if err != nil {
		return "", 0, err
	}
	defer func() { _ = os.Remove(archive) }()
	st, err := os.Stat(archive)
	if err != nil {
		return "", 0, err
	}
	if err := n.ImportImage(ctx, archive); err != nil {
		return "", 0, fmt.Errorf("importing %s into node %s: %w", ref, n.Name, err)
	}
	return ref, st.Size(), nil
}
