// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package safetext

// Cap and Join bound the length of messages built from input, so that a
// hostile or careless input cannot make an error (a gRPC answer, an Event,
// a hook's stderr) megabytes long. What is cut is counted, never silently
// dropped: the reader learns that there was more and how much.

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Cap returns s unchanged when it has at most maxBytes bytes; otherwise its
// first bytes, cut at a rune boundary, followed by a note of how many bytes
// were left out, the whole at most maxBytes bytes (maxBytes below the note's length
// gives just the note).
func Cap(s string, maxBytes int) string {
	if len(s) <= maxBytes {
		return s
	}
	// The note is longest when everything is left out; sizing the head for
	// that note keeps the result within maxBytes whatever is cut.
	keep := max(0, maxBytes-len(note(len(s))))
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + note(len(s)-keep)
}

func note(leftOut int) string { return fmt.Sprintf("… (%d more bytes left out)", leftOut) }

// Join joins msgs with sep and keeps the result within maxBytes: whole
// messages while they fit (the first is always kept, cut by Text if it
// alone is too long), then a note of how many messages were left out.
func Join(msgs []string, sep string, maxBytes int) string {
	var b strings.Builder
	for i, m := range msgs {
		rest := len(msgs) - i - 1
		tail := ""
		if rest > 0 {
			tail = fmt.Sprintf("%s(and %d more left out)", sep, rest)
		}
		piece := m
		if i > 0 {
			piece = sep + m
		}
		if b.Len()+len(piece)+len(tail) <= maxBytes {
			b.WriteString(piece)
			continue
		}
		if i == 0 {
			b.WriteString(Cap(m, max(0, maxBytes-len(tail))))
			continue
		}
		fmt.Fprintf(&b, "%s(and %d more left out)", sep, len(msgs)-i)
		return b.String()
	}
	return b.String()
}
