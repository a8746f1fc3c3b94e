// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package deps_test

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/gpufrac/gpufrac/"

// ours lists the module's packages (production imports only) by path
// relative to the module.
func ours(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, p := range list(t, nil, "./...") {
		rel, ok := strings.CutPrefix(p.path, module)
		if !ok {
			continue
		}
		for _, imp := range p.imports {
			if r, ok := strings.CutPrefix(imp, module); ok {
				out[rel] = append(out[rel], r)
			}
		}
		if _, ok := out[rel]; !ok {
			out[rel] = nil
		}
	}
	if len(out) < 40 {
		t.Fatalf("go list ./... found only %d packages of the module", len(out))
	}
	return out
}

// TestCoreImportsNothingOfTheNode: internal/core is the pure core the CLI,
// the webhook and the node share (claim + config + inventory → plan and
// slices, the scheduler's allocation replayed); it must stay usable
// without the node's code.
func TestCoreImportsNothingOfTheNode(t *testing.T) {
	found := 0
	for _, p := range list(t, nil, "-deps", "./internal/core/...") {
		rel, ok := strings.CutPrefix(p.path, module)
		if !ok {
			continue
		}
		found++
		for _, banned := range []string{"internal/node", "internal/sim", "internal/cli", "internal/controller", "internal/admission", "cmd"} {
			if rel == banned || strings.HasPrefix(rel, banned+"/") {
				t.Errorf("internal/core depends on %s", rel)
			}
		}
	}
	if found < 3 {
		t.Fatalf("go list -deps ./internal/core/... found %d packages of the module", found)
	}
}

// TestNoImportGoesBackUp: a package never imports one in a folder above
// its own (internal/cli/why importing internal/cli, say): the folders are
// a tree whose leaves serve their parents.
func TestNoImportGoesBackUp(t *testing.T) {
	for p, imps := range ours(t) {
		for _, imp := range imps {
			if strings.HasPrefix(p, imp+"/") {
				t.Errorf("%s imports %s, a folder above it", p, imp)
			}
		}
	}
}

// area is the folder a package belongs to for TestNoCircleBetweenAreas:
// api, and the first two path elements otherwise (internal/node,
// internal/core, cmd/gpufrac-controller, pkg/domain, ...).
func area(p string) string {
	parts := strings.Split(p, "/")
	if parts[0] == "api" || len(parts) < 2 {
		return parts[0]
	}
	return parts[0] + "/" + parts[1]
}

// TestNoCircleBetweenAreas: Go refuses cycles between packages; this holds
// the areas (internal/node, internal/core, internal/sim, ...) to the same
// rule, so each area can be read, changed and tested on top of the ones
// below it.
func TestNoCircleBetweenAreas(t *testing.T) {
	edges := map[string]map[string]string{} // area -> area -> one import that makes the edge
	for p, imps := range ours(t) {
		for _, imp := range imps {
			a, b := area(p), area(imp)
			if a == b {
				continue
			}
			if edges[a] == nil {
				edges[a] = map[string]string{}
			}
			edges[a][b] = p + " -> " + imp
		}
	}
	if circle := findCircle(edges); circle != nil {
		t.Errorf("the areas import each other in a circle: %s", strings.Join(circle, "; "))
	}
}

// findCircle returns the imports of one circle in edges, or nil.
func findCircle(edges map[string]map[string]string) []string {
	const (
		unseen = iota
		open
		done
	)
	state := map[string]int{}
	var stack []string
	var circle []string
	var visit func(a string) bool
	visit = func(a string) bool {
		state[a] = open
		stack = append(stack, a)
		next := make([]string, 0, len(edges[a]))
		for b := range edges[a] {
			next = append(next, b)
		}
		sort.Strings(next)
		for _, b := range next {
			switch state[b] {
			case open:
				for i := len(stack) - 1; i >= 0; i-- {
					from := stack[i]
					to := b
					if i < len(stack)-1 {
						to = stack[i+1]
					}
					circle = append([]string{edges[from][to]}, circle...)
					if stack[i] == b {
						break
					}
				}
				return true
			case unseen:
				if visit(b) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[a] = done
		return false
	}
	areas := make([]string, 0, len(edges))
	for a := range edges {
		areas = append(areas, a)
	}
	sort.Strings(areas)
	for _, a := range areas {
		if state[a] == unseen && visit(a) {
			return circle
		}
	}
	return nil
}

// TestFindCircle: the circle finder finds a planted circle and names its
// imports, and finds none in a tree.
func TestFindCircle(t *testing.T) {
	tree := map[string]map[string]string{"a": {"b": "a->b", "c": "a->c"}, "b": {"c": "b->c"}}
	if c := findCircle(tree); c != nil {
		t.Errorf("findCircle(tree) = %v, want none", c)
	}
	tree["c"] = map[string]string{"a": "c->a"}
	c := findCircle(tree)
	if got := fmt.Sprint(c); got != "[a->b b->c c->a]" {
		t.Errorf("findCircle(with c->a) = %s, want [a->b b->c c->a]", got)
	}
}

// TestNothingOutsideTestImportsTest: test/ holds the test tiers, their
// doubles and fixtures; the programs that build, fetch, release, demo or
// benchmark live in hack/ and demo/, and no production or tool code (a
// non-test file outside test/) may depend on a test tier. Test files may:
// a package's own tests can use a double.
func TestNothingOutsideTestImportsTest(t *testing.T) {
	for p, imps := range ours(t) {
		if p == "test" || strings.HasPrefix(p, "test/") {
			continue
		}
		for _, imp := range imps {
			if imp == "test" || strings.HasPrefix(imp, "test/") {
				t.Errorf("%s imports %s: only test/ and _test.go files may", p, imp)
			}
		}
	}
}

// TestHookImportsNothingOfThePlugin: the CDI hook is a binary of its own
// (cgo-free, run by the container runtime from the host), so its area,
// internal/hook, imports nothing of the kubelet plugin's, internal/node;
// what the two share (the record the hook writes and the plugin reads) is
// a contract package inside internal/hook.
func TestHookImportsNothingOfThePlugin(t *testing.T) {
	found := 0
	for _, p := range list(t, nil, "-deps", "./internal/hook/...", "./cmd/gpufrac-cdi-hook") {
		rel, ok := strings.CutPrefix(p.path, module)
		if !ok {
			continue
		}
		found++
		for _, banned := range []string{"internal/node", "internal/controller", "internal/admission", "internal/cli"} {
			if rel == banned || strings.HasPrefix(rel, banned+"/") {
				t.Errorf("the hook depends on %s", rel)
			}
		}
	}
	if found < 4 {
		t.Fatalf("go list -deps ./internal/hook/... found %d packages of the module", found)
	}
}
