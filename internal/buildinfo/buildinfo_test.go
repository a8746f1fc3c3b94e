// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package buildinfo

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLDFlagStampsTheVersion builds a program that prints Version with
// LDFlag and runs it: the flag's package path must be this package's.
func TestLDFlagStampsTheVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	// The program must sit inside the module: Go lets only packages under
	// github.com/gpufrac/gpufrac import internal/buildinfo.
	dir, err := os.MkdirTemp(".", "stamptest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	main := filepath.Join(dir, "main.go")
	src := "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/gpufrac/gpufrac/internal/buildinfo\"\n)\n\nfunc main() { fmt.Print(buildinfo.Version) }\n"
	if err := os.WriteFile(main, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "v")
	cmd := exec.Command("go", "build", "-ldflags", LDFlag("1.2.3-test"), "-o", bin, "./"+filepath.Base(dir))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(out)); got != "1.2.3-test" {
		t.Errorf("the stamped binary says %q, want 1.2.3-test", got)
	}
}
