// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hygiene

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// MakeFiles are the Makefile at root and the files it includes from
// hack/make, in that order.
func MakeFiles(root string) ([]string, error) {
	mk, err := filepath.Glob(filepath.Join(root, "hack", "make", "*.mk"))
	if err != nil {
		return nil, err
	}
	sort.Strings(mk)
	return append([]string{filepath.Join(root, "Makefile")}, mk...), nil
}

var (
	phonyLine  = regexp.MustCompile(`^\.PHONY:(.*)$`)
	targetLine = regexp.MustCompile(`^([A-Za-z0-9_-]+):([^=].*)?$`)
	varLine    = regexp.MustCompile(`^([A-Z0-9_]+)\s*[?:]?=\s*(.*)$`)
)

// Make is what the make files declare: the .PHONY targets, each target's
// `## ` help text (empty when it has none), and the variables' values.
type Make struct {
	Phony []string
	Help  map[string]string
	Vars  map[string]string
}

// ReadMake parses files (see MakeFiles); it knows only what the checks
// below need: target lines, .PHONY and one-line variable definitions.
func ReadMake(files []string) (Make, error) {
	m := Make{Help: map[string]string{}, Vars: map[string]string{}}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return m, err
		}
		sc := bufio.NewScanner(strings.NewReader(string(data)))
		for sc.Scan() {
			line := sc.Text()
			if p := phonyLine.FindStringSubmatch(line); p != nil {
				m.Phony = append(m.Phony, strings.Fields(p[1])...)
				continue
			}
			if v := varLine.FindStringSubmatch(line); v != nil {
				m.Vars[v[1]] = strings.TrimSpace(v[2])
				continue
			}
			if t := targetLine.FindStringSubmatch(line); t != nil {
				_, help, _ := strings.Cut(t[2], "## ")
				m.Help[t[1]] = strings.TrimSpace(help)
			}
		}
	}
	return m, nil
}

// MissingHelp lists the .PHONY targets that have no rule or whose rule
// line carries no `## ` text for `make help`.
func (m Make) MissingHelp() []string {
	var out []string
	for _, t := range m.Phony {
		help, ok := m.Help[t]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s is .PHONY but has no rule", t))
		case help == "":
			out = append(out, fmt.Sprintf("%s has no `## ` line for make help", t))
		}
	}
	return out
}

// TestNames splits a `go test -run` pattern of the form ^(A|B|C)$ (make's
// $$ for $) into its names.
func TestNames(pattern string) ([]string, error) {
	p := strings.TrimSuffix(strings.TrimSuffix(pattern, "$$"), "$")
	p = strings.TrimPrefix(p, "^")
	p = strings.TrimSuffix(strings.TrimPrefix(p, "("), ")")
	names := strings.Split(p, "|")
	for _, n := range names {
		if !regexp.MustCompile(`^Test[A-Za-z0-9_]+$`).MatchString(n) {
			return nil, fmt.Errorf("%q in %q is not a test name: the list must be ^(TestA|TestB)$", n, pattern)
		}
	}
	return names, nil
}

// UndefinedTests lists the names that no _test.go file in dir declares as
// a top-level func.
func UndefinedTests(dir string, names []string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
	if err != nil {
		return nil, err
	}
	declared := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test[A-Za-z0-9_]+)\(t \*testing\.T\)`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range decl.FindAllStringSubmatch(string(data), -1) {
			declared[m[1]] = true
		}
	}
	var missing []string
	for _, n := range names {
		if !declared[n] {
			missing = append(missing, n)
		}
	}
	return missing, nil
}
