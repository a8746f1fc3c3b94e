// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hygiene checks what the repository tracks rather than what the
// code does: no build output or other binary in git (every build goes
// under bin/, which is ignored), and a license header on every Go file.
package hygiene

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MaxTrackedBytes is the largest file the repository tracks outside
// AllowedLarge: a source file, a manifest, a doc and a test fixture are far
// below it; a build output is far above it.
const MaxTrackedBytes = 1 << 20

// AllowedLarge lists the tracked files that may exceed MaxTrackedBytes or
// hold an executable format, each with its reason. Empty today: add a path
// here only with a reason a reviewer accepts.
func AllowedLarge() map[string]string { return map[string]string{} }

// executableMagic are the leading bytes of the executable and object
// formats a Go or C build writes: ELF (Linux), the four Mach-O forms
// (darwin, 32/64-bit, either byte order, and fat binaries), PE (Windows'
// "MZ"), WebAssembly and ar archives (Go's .a, static libraries).
var executableMagic = []struct {
	name  string
	magic []byte
}{
	{"ELF", []byte{0x7f, 'E', 'L', 'F'}},
	{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xce}},
	{"Mach-O", []byte{0xce, 0xfa, 0xed, 0xfe}},
	{"Mach-O", []byte{0xfe, 0xed, 0xfa, 0xcf}},
	{"Mach-O", []byte{0xcf, 0xfa, 0xed, 0xfe}},
	{"Mach-O universal", []byte{0xca, 0xfe, 0xba, 0xbe}},
	{"PE", []byte{'M', 'Z'}},
	{"WebAssembly", []byte{0x00, 'a', 's', 'm'}},
	{"ar archive", []byte("!<arch>\n")},
}

// CheckTracked reads each file of paths (relative to root) and returns one
// problem per file that is an executable format or larger than
// MaxTrackedBytes and not in allowed (AllowedLarge in the repository).
func CheckTracked(root string, paths []string, allowed map[string]string) ([]string, error) {
	var problems []string
	for _, p := range paths {
		if _, ok := allowed[p]; ok {
			continue
		}
		full := filepath.Join(root, p)
		info, err := os.Lstat(full)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted in the work tree, not yet in the index
			}
			return nil, err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if kind, err := executableKind(full); err != nil {
			return nil, err
		} else if kind != "" {
			problems = append(problems, fmt.Sprintf("%s: an executable (%s; build outputs go under bin/, which git ignores)", p, kind))
			continue
		}
		if info.Size() > MaxTrackedBytes {
			problems = append(problems, fmt.Sprintf("%s: %d bytes, more than %d (build outputs go under bin/; a large fixture needs an entry in AllowedLarge)", p, info.Size(), MaxTrackedBytes))
		}
	}
	return problems, nil
}

func executableKind(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close() //nolint:errcheck // read only
	head := make([]byte, 8)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	head = head[:n]
	for _, m := range executableMagic {
		if bytes.HasPrefix(head, m.magic) {
			return m.name, nil
		}
	}
	return "", nil
}

// Header is what every Go file of the repository starts with.
const Header = "// Copyright The gpufrac Authors.\n// SPDX-License-Identifier: Apache-2.0\n"

// CheckHeaders returns one problem per Go file of paths (relative to root)
// that does not start with Header.
func CheckHeaders(root string, paths []string) ([]string, error) {
	var problems []string
	for _, p := range paths {
		if !strings.HasSuffix(p, ".go") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		if !bytes.HasPrefix(b, []byte(Header)) {
			problems = append(problems, fmt.Sprintf("%s: does not start with the license header %q", p, Header))
		}
	}
	return problems, nil
}
