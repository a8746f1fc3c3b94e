// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hostbin_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/hack/hostbin"
	"github.com/gpufrac/gpufrac/internal/mustrun"
)

const repoRoot = "../.."

// buildHostBinaries builds the host binaries with the Makefile's own
// target, as `make build` and a release do, into a fresh directory.
func buildHostBinaries(t *testing.T) (dir string, bins []string) {
	t.Helper()
	bins, err := hostbin.HostBinaries(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		mustrun.Need(t, false, "make not found: the host binaries are built by the Makefile's build-host target")
	}
	dir = t.TempDir()
	cmd := exec.CommandContext(t.Context(), "make", "-s", "--no-print-directory", "build-host", "BIN="+dir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build-host: %v\n%s", err, out)
	}
	return dir, bins
}

// TestHookRunsOnOldGlibc: every host binary, built as the Makefile builds
// it, needs nothing of the C library that glibc 2.17 lacks (no GLIBC_x.y
// version need above 2.17) and no library but glibc's libc, libdl and
// libpthread; and the checker fails the binaries that would not run there.
func TestHookRunsOnOldGlibc(t *testing.T) {
	dir, bins := buildHostBinaries(t)
	if !slices.Contains(bins, "gpufrac-cdi-hook") {
		t.Errorf("the Makefile's HOST_BINARIES %v leave out gpufrac-cdi-hook, which runs on the host", bins)
	}
	for _, b := range bins {
		problems, err := hostbin.Check(filepath.Join(dir, b))
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		for _, p := range problems {
			t.Errorf("%s %s: it would not run on a host with glibc %d.%d", b, p, hostbin.GlibcFloorMajor, hostbin.GlibcFloorMinor)
		}
	}
	t.Run("a cgo build fails", func(t *testing.T) {
		if _, err := exec.LookPath("gcc"); err != nil {
			mustrun.Need(t, false, "gcc not found: no cgo build here")
		}
		// The hook as it was built before: with cgo, against this
		// machine's glibc (2.36 on the Debian bookworm images that build
		// gpufrac), which needs GLIBC_2.34 at least.
		bin := filepath.Join(t.TempDir(), "gpufrac-cdi-hook")
		cmd := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/gpufrac-cdi-hook")
		cmd.Dir = repoRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build with cgo: %v\n%s", err, out)
		}
		problems, err := hostbin.Check(bin)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, "above glibc 2.17") }) {
			t.Errorf("a cgo build of the hook passes the check (%v): the checker cannot see a glibc need", problems)
		}
	})
	t.Run("a library outside glibc fails", func(t *testing.T) {
		gcc, err := exec.LookPath("gcc")
		if err != nil {
			mustrun.Need(t, false, "gcc not found: the planted C program is compiled with it")
		}
		src := filepath.Join(t.TempDir(), "m.c")
		if err := os.WriteFile(src, []byte("#include <math.h>\nint main(int c, char **v) { (void)v; return (int)cos((double)c); }\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(t.TempDir(), "m")
		if out, err := exec.CommandContext(t.Context(), gcc, "-o", bin, src, "-Wl,--no-as-needed", "-lm").CombinedOutput(); err != nil {
			t.Fatalf("gcc: %v\n%s", err, out)
		}
		problems, err := hostbin.Check(bin)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, "needs libm.so.6 (DT_NEEDED)") }) {
			t.Errorf("a program linking libm passes the check (%v)", problems)
		}
	})
}

// TestEveryBuildMakesHostBinariesWithoutCgo: the Dockerfile, which builds
// the published image (and the hook the chart installs on hosts), builds
// each host binary again with CGO_ENABLED=0 after its cgo build of
// ./cmd/..., so the one it copies is the cgo-free one.
func TestEveryBuildMakesHostBinariesWithoutCgo(t *testing.T) {
	bins, err := hostbin.HostBinaries(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(repoRoot, "deployments", "container", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	df := string(raw)
	all := strings.Index(df, "-o /out/ ./cmd/...")
	if all < 0 {
		t.Fatal("the Dockerfile does not build ./cmd/... into /out")
	}
	for _, b := range bins {
		re := regexp.MustCompile(`(?m)^RUN CGO_ENABLED=0 go build .*-o /out/ (\./cmd/\S+ )*\./cmd/` + regexp.QuoteMeta(b) + `( |$)`)
		loc := re.FindStringIndex(df)
		if loc == nil {
			t.Errorf("the Dockerfile does not build %s with CGO_ENABLED=0 into /out", b)
			continue
		}
		if loc[0] < all {
			t.Errorf("the Dockerfile builds %s without cgo before its cgo build of ./cmd/..., which then replaces it", b)
		}
	}
}
