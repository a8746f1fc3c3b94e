// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// A Finding is one name a page uses that the code does not have.
type Finding struct {
	Line int // 1-based
	Name string
	Why  string
}

func (f Finding) String() string { return fmt.Sprintf("%d: %s: %s", f.Line, f.Name, f.Why) }

// Binaries are gpufrac's programs as a page names them: the key is the
// name in text, the value the binary it means.
var Binaries = map[string]string{
	"gpufrac-kubelet-plugin": "gpufrac-kubelet-plugin",
	"gpufrac-controller":     "gpufrac-controller",
	"gpufrac-cdi-hook":       "gpufrac-cdi-hook",
	"gpufrac-mps-launcher":   "gpufrac-mps-launcher",
	"kubectl-gpufrac":        "kubectl-gpufrac",
	"kubectl gpufrac":        "kubectl-gpufrac",
}

var binaryName = regexp.MustCompile(`gpufrac-kubelet-plugin|gpufrac-controller|gpufrac-cdi-hook|gpufrac-mps-launcher|kubectl[- ]gpufrac`)

// LayoutPackages reads the package tree of the architecture's layout block:
// a line at column 0 names a folder or package by its path, a line indented
// by two spaces names a package inside the last one at column 0, and deeper
// lines continue the description above.
func LayoutPackages(block string) map[string]bool {
	out := map[string]bool{}
	parent := ""
	for _, l := range strings.Split(block, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		switch indent := len(l) - len(strings.TrimLeft(l, " ")); indent {
		case 0:
			parent = strings.TrimSuffix(f[0], "/")
			out[parent] = true
		case 2:
			out[parent+"/"+strings.TrimSuffix(f[0], "/")] = true
		}
	}
	return out
}

// CodeBlockUnder returns the first fenced code block after the heading
// line; empty when there is none.
func CodeBlockUnder(text, heading string) string {
	_, after, ok := strings.Cut(text, "\n"+heading+"\n")
	if !ok {
		return ""
	}
	_, block, ok := strings.Cut(after, "```\n")
	if !ok {
		return ""
	}
	block, _, _ = strings.Cut(block, "```")
	return block
}

// skipGenerated blanks the generated sections of a page: they are checked
// against the code by the reference tests and need no second check.
func skipGenerated(lines []string) []string {
	out := make([]string, len(lines))
	in := false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "<!-- BEGIN GENERATED"):
			in = true
		case strings.HasPrefix(l, "<!-- END GENERATED"):
			in = false
		case !in:
			out[i] = l
		}
	}
	return out
}

// codeLines marks the lines of a page that are inside a fenced code block.
func codeLines(lines []string) []bool {
	out := make([]bool, len(lines))
	fence := ""
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case fence != "":
			out[i] = !strings.HasPrefix(t, fence)
			if !out[i] {
				fence = ""
			}
		case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
			fence = t[:3]
		}
	}
	return out
}

func sortFindings(f []Finding) []Finding {
	sort.Slice(f, func(i, j int) bool { return f[i].Line < f[j].Line || f[i].Line == f[j].Line && f[i].Name < f[j].Name })
	return f
}
