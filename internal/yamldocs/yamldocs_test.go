// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package yamldocs_test

import (
	"slices"
	"testing"

	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

func read(t *testing.T, data string) ([]string, error) {
	t.Helper()
	var docs []string
	for doc, err := range yamldocs.All([]byte(data)) {
		if err != nil {
			return docs, err
		}
		docs = append(docs, string(doc))
	}
	return docs, nil
}

func TestAllSplitsOnSeparatorLines(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"empty", "", nil},
		{"one document", "a: 1\n", []string{"a: 1\n"}},
		{"no final newline", "a: 1", []string{"a: 1\n"}},
		{"leading and trailing separators", "---\na: 1\n---\nb: 2\n---\n", []string{"---\na: 1\n", "b: 2\n"}},
		{"separators alone", "---\n---\n", []string{"---\n"}},
		{"a comment after a separator", "a: 1\n--- # next\nb: 2\n", []string{"a: 1\n", "b: 2\n"}},
		{"comments alone are a document", "# only\n---\na: 1\n", []string{"# only\n", "a: 1\n"}},
		{"--- inside a line is text", "a: '---'\nb: x---\n", []string{"a: '---'\nb: x---\n"}},
		{"JSON", `{"a":1}`, []string{"{\"a\":1}\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := read(t, tc.in)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestAllEndsWithABrokenSeparator(t *testing.T) {
	got, err := read(t, "a: 1\n--- b: 2\nc: 3\n")
	if err == nil || len(got) != 0 {
		t.Errorf("got %q, %v; want no document and an error", got, err)
	}
}

func TestAllStopsWhenTheCallerDoes(t *testing.T) {
	n := 0
	for _, err := range yamldocs.All([]byte("a: 1\n---\nb: 2\n---\nc: 3\n")) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		break
	}
	if n != 1 {
		t.Errorf("%d documents after break", n)
	}
}

func TestBlank(t *testing.T) {
	for in, want := range map[string]bool{
		"": true, "\n  \n": true, "# a\n  # b\n": true, "---\n": true, "--- # start\n# a\n": true,
		"# a\nx: 1\n": false, "x": false, "---\nx: 1\n": false, " ---\n": false,
	} {
		if got := yamldocs.Blank([]byte(in)); got != want {
			t.Errorf("Blank(%q) = %t, want %t", in, got, want)
		}
	}
}
