// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package safetext bounds untrusted text: it keeps strings (object names,
// annotation values, messages taken from manifests or the cluster) from
// acting on the terminal they are printed to (Escape, Writer), keeps lists
// of them to a readable length (LimitLines), and caps the length of one
// message built from input (Cap, Join).
//
// A name such as "x\x1b]0;title\a" printed raw would retitle the window;
// "\x1b[2J" would clear it; a right-to-left override (U+202E) reorders what
// follows so a line can read as something it is not. Escape writes every
// such character as a Go escape (\x1b, \u202e), so what is printed is
// inert and still says what was there.
package safetext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// unsafe reports whether r must not reach a terminal raw: C0 controls other
// than newline and tab, DEL, C1 controls (U+0080-U+009F: 0x9b is a
// one-byte CSI on terminals that honour 8-bit controls), and the Unicode
// bidirectional controls (Trojan Source, CVE-2021-42574).
func unsafe(r rune, keepLines bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return !keepLines
	case r < 0x20 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return false
}

// Escape returns s with every control character, newline and tab included,
// and every byte that is not valid UTF-8, written as a Go escape; a string
// without them is returned unchanged.
func Escape(s string) string { return escape(s, false) }

func escape(s string, keepLines bool) string {
	clean := true
	for i, r := range s {
		if unsafe(r, keepLines) || (r == utf8.RuneError && isInvalid(s[i:])) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafe(r, keepLines) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r, keepLines):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func isInvalid(s string) bool {
	_, size := utf8.DecodeRuneInString(s)
	return size <= 1
}

// LimitLines keeps at most n of lines and, when some are left out, adds a line
// saying how many.
func LimitLines(lines []string, n int, what string) []string {
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n:n], fmt.Sprintf("... and %d more %s", len(lines)-n, what))
}

// Writer escapes what is written through it as Escape does, newlines and
// tabs excepted, so a command's whole output is safe whatever it prints.
// It is stateless: a multi-byte character split across two writes is
// escaped byte by byte (fmt never splits one), which errs on the safe side.
func Writer(w io.Writer) io.Writer { return writer{w} }

type writer struct{ w io.Writer }

func (w writer) Write(p []byte) (int, error) {
	s := escape(string(p), true)
	if _, err := io.WriteString(w.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}
