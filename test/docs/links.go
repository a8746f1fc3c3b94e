// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"regexp"
	"strconv"
	"strings"
	"unicode"
)

var inlineCode = regexp.MustCompile("`[^`]*`")

// ProseLines returns the lines of a Markdown text with fenced code blocks
// and inline code blanked out (line numbers stay), so that neither a shell
// comment in a code block reads as a heading nor code as a link.
func ProseLines(text string) []string {
	lines := strings.Split(text, "\n")
	out := make([]string, len(lines))
	fence := ""
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		out[i] = l
	}
	for i, l := range out {
		// Keep a code span's text inside link text ([`x`](y) still links),
		// drop it elsewhere.
		out[i] = inlineCode.ReplaceAllStringFunc(l, func(s string) string {
			return strings.Repeat("x", len(s))
		})
	}
	return out
}

// Anchors lists the anchors GitHub gives the headings of a Markdown text:
// lower case, punctuation dropped, spaces as hyphens, and -1, -2, ... on
// repeats.
func Anchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	lines := strings.Split(text, "\n")
	fence := ""
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if fence != "" {
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		}
		if strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fence = t[:3]
			continue
		}
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level == 0 || level > 6 || !strings.HasPrefix(l[level:], " ") {
			continue
		}
		slug := Slug(l[level:])
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// Slug is GitHub's anchor for a heading's text.
func Slug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
