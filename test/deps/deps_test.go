// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package deps_test pins the dependency rules of the layout
// (docs/design/architecture.md, "Dependencies"): asked of `go list`, so a new
// import that breaks one fails here rather than in a user's build.
package deps_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type pkg struct {
	path     string
	standard bool
	cgo      bool
	imports  []string
}

// list runs go list from the repository root with env added and parses one
// line per package: import path, standard, cgo, imports.
func list(t *testing.T, env []string, args ...string) []pkg {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list", "-f",
		`{{.ImportPath}} {{.Standard}} {{if .CgoFiles}}true{{else}}false{{end}} {{join .Imports ","}}`}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, stderr.String())
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		p := pkg{path: f[0], standard: f[1] == "true", cgo: f[2] == "true"}
		if len(f) > 3 {
			p.imports = strings.Split(f[3], ",")
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func isStandard(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// TestDomainImportsOnlyStdlibAndAPIMachinery: pkg/domain is the leaf every
// audience shares.
func TestDomainImportsOnlyStdlibAndAPIMachinery(t *testing.T) {
	for _, p := range list(t, nil, "./pkg/domain") {
		for _, imp := range p.imports {
			if !isStandard(imp) && !strings.HasPrefix(imp, "k8s.io/apimachinery/") {
				t.Errorf("%s imports %s; the domain leaf may import only the standard library and k8s.io/apimachinery", p.path, imp)
			}
		}
	}
}

// TestPlanLinksNoCgoAndNoClientset: claim planning is pure; it must not
// link NVML (cgo) nor a Kubernetes clientset, so that the CLI and the
// webhook can use it.
func TestPlanLinksNoCgoAndNoClientset(t *testing.T) {
	for _, target := range []string{"./internal/core/plan", "./pkg/domain"} {
		deps := list(t, []string{"CGO_ENABLED=1"}, "-deps", target)
		if len(deps) < 2 {
			t.Fatalf("go list -deps %s listed %d packages", target, len(deps))
		}
		for _, p := range deps {
			if p.cgo && !p.standard {
				t.Errorf("%s depends on %s, which uses cgo", target, p.path)
			}
			if strings.HasPrefix(p.path, "github.com/NVIDIA/") || p.path == "k8s.io/client-go/kubernetes" {
				t.Errorf("%s depends on %s", target, p.path)
			}
		}
	}
}

// TestCLIBuildsWithoutCgo: kubectl-gpufrac is installed by krew and go
// install on machines without a C toolchain or NVML, linux and darwin.
// Asked of go list for each platform krew ships (build constraints
// applied, nothing compiled): the release test (make test-release)
// compiles the four binaries once, and compiling them here as well cost a
// cold CI twenty minutes.
func TestCLIBuildsWithoutCgo(t *testing.T) {
	for _, p := range list(t, []string{"CGO_ENABLED=1"}, "-deps", "./cmd/kubectl-gpufrac") {
		if strings.HasPrefix(p.path, "github.com/NVIDIA/") || (p.cgo && !p.standard) {
			t.Errorf("kubectl-gpufrac depends on %s (cgo)", p.path)
		}
	}
	for _, target := range [][2]string{{"linux", "amd64"}, {"linux", "arm64"}, {"darwin", "amd64"}, {"darwin", "arm64"}} {
		env := []string{"CGO_ENABLED=0", "GOOS=" + target[0], "GOARCH=" + target[1]}
		deps := list(t, env, "-deps", "./cmd/kubectl-gpufrac")
		if len(deps) < 50 {
			t.Fatalf("%v go list -deps ./cmd/kubectl-gpufrac listed %d packages", env, len(deps))
		}
		for _, p := range deps {
			if p.cgo && !p.standard {
				t.Errorf("%v: kubectl-gpufrac depends on %s, which needs cgo", env, p.path)
			}
		}
	}
}

// TestNoBinaryLinksNVMLAndCLIRuntime: k8s.io/cli-runtime links Go's plugin
// package (through kustomize), which makes the linker bind every symbol
// at start (-z now); go-nvml leaves NVML's symbols to lazy binding (newer
// entry points are absent from older drivers). A binary or test linking
// both dies at start with "undefined symbol: nvml...". So the two never
// meet: only the kubectl plugin's tree uses cli-runtime.
func TestNoBinaryLinksNVMLAndCLIRuntime(t *testing.T) {
	// Every binary: each main package and each test binary (path.test,
	// named main too), with everything it links.
	cmd := exec.CommandContext(t.Context(), "go", "list", "-test", "-f", `{{.ImportPath}} {{.Name}} {{join .Deps ","}}`, "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -test ./...: %v\n%s", err, stderr.String())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	checked := 0
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 3)
		if len(f) < 3 || f[1] != "main" {
			continue
		}
		checked++
		var nvml, cliRuntime bool
		for _, d := range strings.Split(f[2], ",") {
			nvml = nvml || strings.HasPrefix(d, "github.com/NVIDIA/go-nvml/")
			cliRuntime = cliRuntime || strings.HasPrefix(d, "k8s.io/cli-runtime/")
		}
		if nvml && cliRuntime {
			t.Errorf("%s links both go-nvml and k8s.io/cli-runtime", f[0])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checked < 10 {
		t.Fatalf("go list -test found only %d binaries to check", checked)
	}
}
