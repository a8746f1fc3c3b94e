// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package nvmltest builds, for tests, a stand-in libnvidia-ml.so.1 from
// C (standin.c) with gcc: it exports the NVML entry points gpufrac-cdi-hook
// loads, refuses what nvml.h documents NVML refuses (uninitialised calls,
// unknown UUIDs, a soft limit above the hard one or a limit above the
// GPU's memory, a cgroup path that does not open) and records every call
// it receives, with the values it read out of the structs, so a test can
// check what NVML would see from the real, unsimulated hook binary.
package nvmltest

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

//go:embed testdata/standin.c
var source []byte

// The stand-in's environment: where it records calls, and its GPUs.
const (
	EnvRecord = "GPUFRAC_NVML_STANDIN_RECORD"
	EnvGPUs   = "GPUFRAC_NVML_STANDIN_GPUS"
)

// Call is one call the stand-in received, as it recorded it.
type Call struct {
	Call      string `json:"call"`
	Ret       int    `json:"ret"`
	UUID      string `json:"uuid"`
	NameSpace string `json:"nameSpace"`
	SoftLimit uint64 `json:"softLimit"`
	HardLimit uint64 `json:"hardLimit"`
	// StructSize is sizeof the struct the stand-in read the limits from.
	StructSize int `json:"structSize"`
}

// Build compiles the stand-in into dir/libnvidia-ml.so.1 and returns its
// path; withLimits false builds a driver before r615, without the
// per-cgroup limit entry points. It skips the test where gcc is missing (fails it where the tests must run: internal/mustrun).
func Build(t testing.TB, dir string, withLimits bool) string {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	mustrun.Need(t, err == nil, "gcc not found: the NVML stand-in is compiled from C")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "standin.c")
	if err := os.WriteFile(src, source, 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, "libnvidia-ml.so.1")
	args := []string{"-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", lib, src}
	if !withLimits {
		args = append([]string{"-DNO_MEMORY_LIMITS"}, args...)
	}
	if out, err := exec.CommandContext(t.Context(), gcc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return lib
}

// GPUs is the value of EnvGPUs for these UUIDs and memory sizes.
func GPUs(total map[string]uint64) string {
	var parts []string
	for uuid, bytes := range total {
		parts = append(parts, fmt.Sprintf("%s=%d", uuid, bytes))
	}
	return strings.Join(parts, ",")
}

// Calls reads the calls recorded in path, in order; none when it does not
// exist.
func Calls(path string) ([]Call, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Call
	for line := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, line, err)
		}
		out = append(out, c)
	}
	return out, nil
}
