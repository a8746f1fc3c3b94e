// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package safetext_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

func TestCap(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		maxBytes int
		want     string
	}{
		{"short stays", "abc", 10, "abc"},
		{"exactly the bound stays", "abcdefghij", 10, "abcdefghij"},
		{"long is cut with the count", strings.Repeat("x", 100), 40, strings.Repeat("x", 11) + "… (89 more bytes left out)"},
		{"bound below the note gives the note", strings.Repeat("x", 100), 5, "… (100 more bytes left out)"},
		{"cut at a rune boundary", strings.Repeat("é", 50), 40, strings.Repeat("é", 5) + "… (90 more bytes left out)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := safetext.Cap(tc.in, tc.maxBytes)
			if got != tc.want {
				t.Errorf("Cap(%d bytes, %d) = %q, want %q", len(tc.in), tc.maxBytes, got, tc.want)
			}
			if len(got) > max(tc.maxBytes, len("… (100 more bytes left out)")) {
				t.Errorf("%d bytes, over the bound %d", len(got), tc.maxBytes)
			}
			if !utf8.ValidString(got) {
				t.Errorf("%q is not valid UTF-8", got)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	many := make([]string, 1000)
	for i := range many {
		many[i] = "field: Invalid value"
	}
	for _, tc := range []struct {
		name     string
		in       []string
		maxBytes int
		want     string
	}{
		{"all fit", []string{"a", "b"}, 100, "a; b"},
		{"the rest is counted", many[:5], 70, "field: Invalid value; field: Invalid value; (and 3 more left out)"},
		{"a huge first message is cut, the next still fits", []string{strings.Repeat("y", 1000), "b"}, 60,
			strings.Repeat("y", 7) + "… (993 more bytes left out); b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := safetext.Join(tc.in, "; ", tc.maxBytes)
			if got != tc.want {
				t.Errorf("Join = %q, want %q", got, tc.want)
			}
			if len(got) > tc.maxBytes {
				t.Errorf("%d bytes, over the bound %d", len(got), tc.maxBytes)
			}
		})
	}
	if got := safetext.Join(many, "; ", 4096); len(got) > 4096 || !strings.HasSuffix(got, "more left out)") {
		t.Errorf("1000 messages in %d bytes: %q", len(got), got[len(got)-40:])
	}
}
