// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package safetext

import (
	"bytes"
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain-name", "plain-name"},
		{"ünïcode 141Gi", "ünïcode 141Gi"},
		{"a\x1b[31mred", `a\x1b[31mred`},
		{"title\x1b]0;pwned\a", `title\x1b]0;pwned\x07`},
		{"two\nlines\ttab\r", `two\x0alines\x09tab\x0d`},
		{"c1\u009b2J", `c1\u009b2J`},
		{"bidi\u202eevil", `bidi\u202eevil`},
		{"bad\xffutf8\xc2", `bad\xffutf8\xc2`},
		{"del\x7f", `del\x7f`},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestWriterKeepsLines(t *testing.T) {
	var b bytes.Buffer
	w := Writer(&b)
	n, err := w.Write([]byte("ok\tfine\nname \x1b[2J\n"))
	if err != nil || n != 18 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	if got, want := b.String(), "ok\tfine\nname \\x1b[2J\n"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestLimitLines(t *testing.T) {
	got := LimitLines([]string{"a", "b", "c", "d"}, 2, "problems")
	if strings.Join(got, "|") != "a|b|... and 2 more problems" {
		t.Fatalf("Limit = %q", got)
	}
	if got := LimitLines([]string{"a"}, 2, "problems"); len(got) != 1 {
		t.Fatalf("Limit = %q", got)
	}
}
