// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hygiene

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestNoProductionFunctionOver80Lines(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := CheckFuncLengths(root, MaxFuncLines)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// TestFuncLengthCheckFailsOnAPlantedLongFunction shows the check above can
// fail: a function one line over the limit is reported, by name and line,
// and one exactly at the limit is not.
func TestFuncLengthCheckFailsOnAPlantedLongFunction(t *testing.T) {
	// body returns a function of exactly lines lines: the func line, the
	// statements, the closing brace.
	body := func(decl string, lines int) string {
		return decl + " {\n" + strings.Repeat("\t_ = 0\n", lines-2) + "}\n"
	}
	src := Header + "\npackage planted\n\n" +
		body("func atTheLimit()", MaxFuncLines) + "\n" +
		body("func (*server) overTheLimit()", MaxFuncLines+1)
	problems, err := LongFuncs("planted.go", []byte(src), MaxFuncLines)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Count(Header+"\npackage planted\n\n", "\n") + MaxFuncLines + 2
	want := fmt.Sprintf("planted.go:%d: server.overTheLimit is %d lines, more than %d: split it into named steps", line, MaxFuncLines+1, MaxFuncLines)
	if len(problems) != 1 || problems[0] != want {
		t.Fatalf("problems = %q, want [%q]", problems, want)
	}
}
