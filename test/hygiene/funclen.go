// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hygiene

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// MaxFuncLines is the most lines a production function may span, from its
// func line to its closing brace. A function longer than this does several
// things; the reader (and the reviewer) is better served by named steps.
const MaxFuncLines = 80

// skippedDirs are the folders of the repository that hold no production
// code of the root module: git's own, build outputs, fixtures, the test
// tiers (test/) and the tools and demo program (hack/, demo/: the harness,
// builders and release scripts moved out of test/ read as scripts, not
// library code, and were never under the rule).
var skippedDirs = map[string]bool{".git": true, "bin": true, "testdata": true, "test": true, "hack": true, "demo": true}

// CheckFuncLengths parses every production Go file of the module rooted
// at root (no _test.go file, nothing under a skipped folder or another
// module) and returns one problem per function longer than limit lines.
func CheckFuncLengths(root string, limit int) ([]string, error) {
	var problems []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (skippedDirs[d.Name()] || isModuleRoot(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		found, err := LongFuncs(filepath.ToSlash(rel), src, limit)
		problems = append(problems, found...)
		return err
	})
	return problems, err
}

// isModuleRoot tells whether dir holds a go.mod of its own: a nested
// module is not part of the root module.
func isModuleRoot(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// LongFuncs parses the Go source src, named name in problems, and returns
// one problem per function or method longer than limit lines, counted from
// the func line to the closing brace inclusive.
func LongFuncs(name string, src []byte, limit int) ([]string, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Body == nil {
			continue
		}
		start := fset.Position(fn.Pos()).Line
		lines := fset.Position(fn.Body.Rbrace).Line - start + 1
		if lines > limit {
			problems = append(problems, fmt.Sprintf("%s:%d: %s is %d lines, more than %d: split it into named steps",
				name, start, funcName(fn), lines, limit))
		}
	}
	return problems, nil
}

// funcName is fn's name as a reader looks it up: Type.Method for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
			continue
		case *ast.IndexExpr:
			t = x.X
			continue
		case *ast.IndexListExpr:
			t = x.X
			continue
		case *ast.Ident:
			return x.Name + "." + fn.Name.Name
		}
		return fn.Name.Name
	}
}
