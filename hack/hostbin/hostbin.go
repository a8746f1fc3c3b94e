// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hostbin knows gpufrac's host binaries, the ones that run in the
// host's namespace with the host's C library (the Makefile's
// HOST_BINARIES: gpufrac-cdi-hook), and checks a built one against the
// oldest glibc gpufrac supports: what it needs of the C library is read
// from its ELF dynamic section and version needs, as the dynamic loader
// reads them.
package hostbin

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The oldest glibc a host binary may need: 2.17 (RHEL 7's; RHEL 8 has
// 2.28, RHEL 9 2.34, Ubuntu 22.04 2.35).
const (
	GlibcFloorMajor = 2
	GlibcFloorMinor = 17
)

// allowedNeeded tells the libraries a host binary may name in DT_NEEDED:
// glibc's own, present on every glibc host (purego's dlopen needs libdl,
// its runtime set-up libpthread and libc).
func allowedNeeded(lib string) bool {
	switch lib {
	case "libc.so.6", "libdl.so.2", "libpthread.so.0":
		return true
	}
	return false
}

// HostBinaries reads HOST_BINARIES from the Makefile under repoRoot or one
// of the files it includes (hack/make/*.mk): the one list the Makefile,
// the Dockerfile, the chart image and the test tiers build without cgo.
func HostBinaries(repoRoot string) ([]string, error) {
	included, err := filepath.Glob(filepath.Join(repoRoot, "hack", "make", "*.mk"))
	if err != nil {
		return nil, err
	}
	files := append([]string{filepath.Join(repoRoot, "Makefile")}, included...)
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			name, value, ok := strings.Cut(sc.Text(), ":=")
			if ok && strings.TrimSpace(name) == "HOST_BINARIES" {
				if bins := strings.Fields(value); len(bins) > 0 {
					return bins, nil
				}
			}
		}
	}
	return nil, fmt.Errorf("%s: no HOST_BINARIES := line naming the host binaries", strings.Join(files, ", "))
}

// Check reads the ELF file at path and returns every reason it would not
// run on a host with the floor's glibc: a DT_NEEDED library outside glibc's
// libc, libdl and libpthread, or a symbol version need (GLIBC_x.y) above
// the floor, or a version need that is not a GLIBC_ release at all.
func Check(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var problems []string
	needed, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: reading DT_NEEDED: %w", path, err)
	}
	for _, lib := range needed {
		if !allowedNeeded(lib) {
			problems = append(problems, fmt.Sprintf("needs %s (DT_NEEDED), which is not glibc's libc, libdl or libpthread", lib))
		}
	}
	// The dynamic loader reads version needs through DT_VERNEED; Go's own
	// linker leaves the tag out (and its empty sections untyped) when a
	// binary imports symbols without versions, as purego's do.
	count, err := f.DynValue(elf.DT_VERNEEDNUM)
	if err != nil {
		return nil, fmt.Errorf("%s: reading its dynamic section: %w", path, err)
	}
	if len(count) == 0 || count[0] == 0 {
		return problems, nil
	}
	needs, err := f.DynamicVersionNeeds()
	if err != nil {
		return nil, fmt.Errorf("%s: reading its version needs: %w", path, err)
	}
	for _, n := range needs {
		for _, v := range n.Needs {
			if reason := checkVersion(v.Dep); reason != "" {
				problems = append(problems, fmt.Sprintf("needs %s from %s: %s", v.Dep, n.Name, reason))
			}
		}
	}
	return problems, nil
}

// checkVersion says why a version need is above the floor, or "".
func checkVersion(name string) string {
	rest, ok := strings.CutPrefix(name, "GLIBC_")
	if !ok {
		return "not a glibc release version"
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 {
		return "not a glibc release version"
	}
	var v [2]int
	for i := range v {
		n, err := strconv.Atoi(parts[i])
		if err != nil {
			return "not a glibc release version"
		}
		v[i] = n
	}
	if v[0] > GlibcFloorMajor || (v[0] == GlibcFloorMajor && v[1] > GlibcFloorMinor) {
		return fmt.Sprintf("above glibc %d.%d", GlibcFloorMajor, GlibcFloorMinor)
	}
	return ""
}
