// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hygiene

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readRepoMake(t *testing.T) (string, Make) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	files, err := MakeFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ReadMake(files)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Phony) < 20 {
		t.Fatalf("found only %d .PHONY targets in %v", len(m.Phony), files)
	}
	return root, m
}

// TestEveryTargetHasHelp: `make help` prints the `## ` text of each
// target's line, so a target without one would be missing from it.
func TestEveryTargetHasHelp(t *testing.T) {
	_, m := readRepoMake(t)
	for _, p := range m.MissingHelp() {
		t.Error(p)
	}
}

// TestCompatTierListsOnlyRealTests: the compatibility tier runs the tests
// COMPAT_TESTS and COMPAT_E2E_TESTS name; a renamed test would silently
// drop out of the tier (go test -run matches nothing and passes).
func TestCompatTierListsOnlyRealTests(t *testing.T) {
	root, m := readRepoMake(t)
	for v, dir := range map[string]string{"COMPAT_TESTS": "test/integration", "COMPAT_E2E_TESTS": "test/e2e"} {
		names, err := TestNames(m.Vars[v])
		if err != nil {
			t.Fatalf("%s: %v", v, err)
		}
		missing, err := UndefinedTests(filepath.Join(root, dir), names)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range missing {
			t.Errorf("%s names %s, which is no test in %s", v, n, dir)
		}
	}
}

// TestMakeChecksFailOnPlantedMistakes shows the two checks above can fail:
// a target without help, a .PHONY name without a rule, and a listed test
// that does not exist are each reported.
func TestMakeChecksFailOnPlantedMistakes(t *testing.T) {
	dir := t.TempDir()
	mk := filepath.Join(dir, "Makefile")
	src := ".PHONY: good bare ghost\nLIST ?= ^(TestReal|TestGone)$$\ngood: ## does a thing\n\ttrue\nbare:\n\ttrue\n"
	if err := os.WriteFile(mk, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ReadMake([]string{mk})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.MissingHelp(); len(got) != 2 {
		t.Errorf("MissingHelp() = %q, want bare and ghost", got)
	}
	names, err := TestNames(m.Vars["LIST"])
	if err != nil || !slices.Equal(names, []string{"TestReal", "TestGone"}) {
		t.Fatalf("TestNames = %v, %v", names, err)
	}
	test := "package x\n\nimport \"testing\"\n\nfunc TestReal(t *testing.T) {}\n"
	if err := os.WriteFile(filepath.Join(dir, "x_test.go"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	missing, err := UndefinedTests(dir, names)
	if err != nil || !slices.Equal(missing, []string{"TestGone"}) {
		t.Errorf("UndefinedTests = %v, %v; want [TestGone]", missing, err)
	}
	if _, err := TestNames("^(TestA|not a test)$"); err == nil {
		t.Error("TestNames accepted a name that is not a test")
	}
}
