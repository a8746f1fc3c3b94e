// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/test/docs"
)

const root = "../.."

// markdownFiles is what the checks cover: the README and every page under
// docs/, design notes and their logs included.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files := []string{filepath.Join(root, "README.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestRelativeLinksResolve: every relative link in README.md and docs/
// names a file or folder of the repository, and where it names a heading
// (#anchor) of a Markdown file, that heading exists, as GitHub renders it.
func TestRelativeLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		anchors[path] = docs.Anchors(string(text))
		return anchors[path]
	}
	checked := 0
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for n, line := range docs.ProseLines(string(text)) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				path, anchor, _ := strings.Cut(target, "#")
				resolved := file
				if path != "" {
					resolved = filepath.Join(filepath.Dir(file), path)
					if _, err := os.Stat(resolved); err != nil {
						t.Errorf("%s:%d: link %q: %v", rel(file), n+1, target, err)
						continue
					}
				}
				if anchor != "" && strings.HasSuffix(resolved, ".md") && !anchorsOf(resolved)[anchor] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", rel(file), n+1, target, rel(resolved), anchor)
				}
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d relative links found: the link pattern no longer matches the docs", checked)
	}
}

func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}

// TestChartValuesReference: docs/reference.md's chart values are the
// chart's values.yaml as it is now.
func TestChartValuesReference(t *testing.T) {
	chart := filepath.Join(root, "deployments", "helm", "gpufrac")
	values, err := os.ReadFile(filepath.Join(chart, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	schema, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	table, err := docs.Values(values, schema)
	if err != nil {
		t.Fatal(err)
	}
	// The rendering must reach the values an operator sets most; a
	// regression in the scanner would otherwise pass as an empty table.
	for _, want := range []string{"`kubeletPlugin.nvidiaDriverRoot`", "`controller.packing.timeoutSeconds`", "`mps.enabled`", "`kubeletPlugin.nodeSelector` | `{\"nvidia.com/gpu.present\":\"true\"}`"} {
		if !strings.Contains(table, want) {
			t.Errorf("rendered values lack %s:\n%s", want, table)
		}
	}
	docs.CheckSection(t, filepath.Join(root, "docs", "reference.md"), "chart-values", table)
}

// TestReadmeStaysShort: the README is what a newcomer reads in ten minutes
// (what, install, the two commands, a first claim, links); reference and
// design belong in docs/.
func TestReadmeStaysShort(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(text), "\n"); n >= 250 {
		t.Errorf("README.md has %d lines; keep it under 250 and move the detail to a page in docs/", n)
	}
	for _, want := range []string{"make demo", "make test"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("README.md no longer names %q, one of the two commands", want)
		}
	}
}
