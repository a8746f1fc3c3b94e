// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package docs keeps the repository's documentation honest: it renders the
// reference of flags and chart values from the code (so docs/reference.md
// cannot drift from what the binaries accept), and its tests check that
// every relative link in README.md and docs/ resolves, that the
// architecture lists every package, that the docs name only flags, metrics
// and chart values the code has, and that no dated log sits among the
// pages for users and operators.
//
// A generated part of a Markdown file sits between two markers,
//
//	<!-- BEGIN GENERATED name -->
//	<!-- END GENERATED name -->
//
// and CheckSection compares it with what the code renders now, or rewrites
// it when GPUFRAC_UPDATE_DOCS=1 (`make docs`).
package docs

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// UpdateEnv is the environment variable that makes CheckSection rewrite
// the generated part instead of comparing it.
const UpdateEnv = "GPUFRAC_UPDATE_DOCS"

// Commands renders a command tree as Markdown: for each command that is
// not hidden, its use line, its short description and a table of the flags
// it defines (persistent ones only where they are defined).
func Commands(root *cobra.Command) string {
	var b strings.Builder
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		fmt.Fprintf(&b, "#### `%s`\n\n", c.CommandPath())
		if c.Short != "" {
			fmt.Fprintf(&b, "%s.\n\n", strings.TrimSuffix(c.Short, "."))
		}
		fmt.Fprintf(&b, "```\n%s\n```\n\n", c.UseLine())
		b.WriteString(flagTable(c.NonInheritedFlags()))
		subs := c.Commands()
		sort.Slice(subs, func(i, j int) bool { return subs[i].Name() < subs[j].Name() })
		for _, s := range subs {
			walk(s)
		}
	}
	walk(root)
	return b.String()
}

func flagTable(fs *pflag.FlagSet) string {
	var rows []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		name := "`--" + f.Name + "`"
		if f.Shorthand != "" {
			name = "`-" + f.Shorthand + "`, " + name
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "[]" {
			def = "`" + f.DefValue + "`"
		}
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | %s |", name, f.Value.Type(), def, cell(f.Usage)))
	})
	if len(rows) == 0 {
		return "No flags.\n\n"
	}
	return "| flag | type | default | |\n| --- | --- | --- | --- |\n" + strings.Join(rows, "\n") + "\n\n"
}

// cell makes text fit in one Markdown table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	// GitHub would take <release> for an HTML tag and show nothing.
	return strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;").Replace(s)
}

// Values renders a Helm chart's values.yaml as one table: a row per value,
// in file order, with its default and the comment written above it. It
// descends into a map only where values.schema.json declares its properties
// (kubeletPlugin, controller.packing, ...); free-form maps such as a
// nodeSelector are one value.
func Values(valuesYAML, schemaJSON []byte) (string, error) {
	var values map[string]any
	if err := yaml.Unmarshal(valuesYAML, &values); err != nil {
		return "", fmt.Errorf("values.yaml: %w", err)
	}
	var schema map[string]any
	if err := json.Unmarshal(schemaJSON, &schema); err != nil {
		return "", fmt.Errorf("values.schema.json: %w", err)
	}
	var b strings.Builder
	b.WriteString("| value | default | |\n| --- | --- | --- |\n")
	for _, k := range scanKeys(valuesYAML) {
		parent, ok := lookup(values, schema, k.path[:len(k.path)-1])
		if !ok || !parent.descend {
			continue
		}
		n, ok := lookup(values, schema, k.path)
		if !ok {
			return "", fmt.Errorf("values.yaml: %s: a key the line scanner found that the YAML parser did not", strings.Join(k.path, "."))
		}
		def := "—"
		if !n.descend {
			raw, err := json.Marshal(n.value)
			if err != nil {
				return "", err
			}
			def = "`" + string(raw) + "`"
		} else if k.comment == "" {
			continue
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", strings.Join(k.path, "."), def, cell(k.comment))
	}
	return b.String(), nil
}

type node struct {
	value   any
	descend bool // a map with declared properties: its keys get rows
}

func lookup(values, schema map[string]any, path []string) (node, bool) {
	var v any = values
	s := schema
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return node{}, false
		}
		if v, ok = m[p]; !ok {
			return node{}, false
		}
		props, _ := s["properties"].(map[string]any)
		s, _ = props[p].(map[string]any) // nil: no schema below here
	}
	m, isMap := v.(map[string]any)
	_, hasProps := s["properties"]
	return node{value: v, descend: isMap && len(m) > 0 && hasProps}, true
}

type key struct {
	path    []string
	comment string
}

var keyLine = regexp.MustCompile(`^( *)([A-Za-z0-9_.\-/"]+):( .*)?$`)

// scanKeys lists the keys of a YAML file in order, each with its path and
// the comment lines right above it. Keys inside lists get paths that no
// lookup matches, which is all that is needed of them.
func scanKeys(text []byte) []key {
	type level struct {
		indent int
		name   string
	}
	var stack []level
	var comment []string
	var keys []key
	for _, line := range strings.Split(string(text), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			comment = nil
			continue
		case strings.HasPrefix(trimmed, "#"):
			comment = append(comment, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			comment = nil
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, level{indent, strings.Trim(m[2], `"`)})
		path := make([]string, len(stack))
		for i, l := range stack {
			path[i] = l.name
		}
		keys = append(keys, key{path: path, comment: strings.Join(comment, " ")})
		comment = nil
	}
	return keys
}

// CheckSection compares the generated part called name of the Markdown file
// at path with content; with GPUFRAC_UPDATE_DOCS=1 it writes content there
// instead. The markers must already be in the file.
func CheckSection(t testing.TB, path, name, content string) {
	t.Helper()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	begin := []byte("<!-- BEGIN GENERATED " + name + " -->\n")
	end := []byte("<!-- END GENERATED " + name + " -->")
	i := bytes.Index(old, begin)
	j := bytes.Index(old, end)
	if i < 0 || j < i {
		t.Fatalf("%s: no generated part %q: add the lines %q and %q where it belongs", path, name, strings.TrimSpace(string(begin)), end)
	}
	start := i + len(begin)
	if string(old[start:j]) == content {
		return
	}
	if os.Getenv(UpdateEnv) == "1" {
		updated := append(append(append([]byte{}, old[:start]...), content...), old[j:]...)
		if err := os.WriteFile(path, updated, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: rewrote the generated part %q", path, name)
		return
	}
	t.Errorf("%s: the generated part %q is not what the code says now; run `make docs` and commit the result. First difference at line %d:\n%s",
		path, name, firstDiffLine(string(old[start:j]), content), diffHint(string(old[start:j]), content))
}

func firstDiffLine(a, b string) int {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range al {
		if i >= len(bl) || al[i] != bl[i] {
			return i + 1
		}
	}
	return len(al) + 1
}

func diffHint(a, b string) string {
	n := firstDiffLine(a, b) - 1
	get := func(s string) string {
		l := strings.Split(s, "\n")
		if n < len(l) {
			return l[n]
		}
		return "(end)"
	}
	return "  committed: " + get(a) + "\n  generated: " + get(b)
}

var envRead = regexp.MustCompile(`(?:envOr|Getenv)\("([A-Za-z0-9_]+)"`)

// ClearEnvOf empties, for the test, every environment variable that the Go
// files given read through envOr or os.Getenv, so that flag defaults taken
// from the environment render as they are in an empty one.
func ClearEnvOf(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range envRead.FindAllStringSubmatch(string(src), -1) {
			t.Setenv(m[1], "")
		}
	}
}
