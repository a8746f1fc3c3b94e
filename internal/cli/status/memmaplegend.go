// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

// legend gives each claim of a node one glyph (the same on every GPU the
// claim holds a share of) and says, per glyph, the claim and its sizes.
type legend struct {
	// usage is the claims' used memory; nil when the map draws none.
	usage    Usage
	index    map[string]int
	entries  []legendEntry
	monitors []string
}

type legendEntry struct {
	claim             string
	request, limit    int64
	devices, problems []string
	// used and borrowed (used above the request, per GPU) are summed over
	// the GPUs whose use a series reported; usedKnown: any did.
	used, borrowed int64
	usedKnown      bool
}

func claimKey(namespace, name string) string { return namespace + "/" + name }

// newLegend lists a node's claims in the order the map draws them.
func newLegend(node []GPU, usage Usage) *legend {
	l := &legend{usage: usage, index: map[string]int{}}
	for _, g := range node {
		for _, c := range g.Claims {
			key := claimKey(c.Namespace, c.Name)
			i, ok := l.index[key]
			if !ok {
				i = len(l.entries)
				l.index[key] = i
				l.entries = append(l.entries, legendEntry{claim: key})
			}
			e := &l.entries[i]
			e.devices = append(e.devices, g.Device)
			switch {
			case c.Invalid != "":
				e.problems = append(e.problems, g.Device+": INVALID "+c.Invalid)
			case !c.Prepared:
				e.request, e.limit = e.request+c.Request, e.limit+c.Limit
				e.problems = append(e.problems, g.Device+": not prepared yet, limit unknown")
			default:
				e.request, e.limit = e.request+c.Request, e.limit+c.Limit
			}
			if u, ok := usage.of(g, c); ok {
				e.used, e.usedKnown = e.used+u, true
				if c.Invalid == "" {
					e.borrowed += max(0, u-c.Request)
				}
			}
		}
		for _, m := range g.Monitors {
			l.monitors = append(l.monitors, claimKey(m.Namespace, m.Name)+" on "+g.Device)
		}
	}
	return l
}

// glyph is the claim's glyph; claims past the glyphs share '*'.
func (l *legend) glyph(c Claim) rune {
	return l.glyphOf(l.index[claimKey(c.Namespace, c.Name)])
}

func (l *legend) glyphOf(i int) rune {
	if l.usage != nil && i >= usedGlyphs {
		return otherGlyph
	}
	if i < len(glyphs) {
		return rune(glyphs[i])
	}
	return otherGlyph
}

// legendFixed is the columns before a legend line's claim name.
const legendFixed = 2 + 1 + 1 + 7 + 1 + 7 + 2

// lines are the legend: a heading, one line per claim (guaranteed, limit
// and, when drawn, used memory summed over the node's GPUs it holds), and
// the monitors.
func (l *legend) lines(p painter, width int) []string {
	if len(l.entries) == 0 && len(l.monitors) == 0 {
		return nil
	}
	fixed, head := legendFixed, fmt.Sprintf("  %s %7s %7s  ", " ", "request", "limit")
	if l.usage != nil {
		fixed, head = legendFixed+8, fmt.Sprintf("  %s %7s %7s %7s  ", " ", "request", "limit", "used")
	}
	out := []string{head + fit("claim (GPUs)", width-fixed)}
	for i, e := range l.entries {
		what := safetext.Escape(e.claim) + " (" + safetext.Escape(strings.Join(e.devices, ",")) + ")"
		if e.borrowed > 0 {
			what += " borrows " + short(e.borrowed)
		}
		if len(e.problems) > 0 {
			what += " " + safetext.Escape(strings.Join(e.problems, "; "))
		}
		req, lim := short(e.request), short(e.limit)
		if e.request == 0 {
			req, lim = "-", "-"
		}
		s := fmt.Sprintf("  %s %7s %7s ", p.paint(claimColour(i), string(l.glyphOf(i))), req, lim)
		if l.usage != nil {
			used := "-"
			if e.usedKnown {
				used = short(e.used)
			}
			s += fmt.Sprintf("%7s ", used)
		}
		out = append(out, s+" "+fit(what, width-fixed))
	}
	for _, m := range l.monitors {
		out = append(out, fit("  monitor "+safetext.Escape(m)+" (adminAccess: sees the GPU, holds no share)", width))
	}
	return out
}

func claimColour(i int) string { return claimColours[i%len(claimColours)] }

// painter colours text when the map is coloured, and not otherwise.
type painter struct{ colour bool }

func (p painter) paint(style, s string) string {
	if !p.colour || style == "" || s == "" {
		return s
	}
	return style + s + sgrReset
}

// cells paints a bar: a run of one glyph is one coloured span.
func (p painter) cells(cells []rune, l *legend) string {
	var b strings.Builder
	for i := 0; i < len(cells); {
		j := i
		for j < len(cells) && cells[j] == cells[i] {
			j++
		}
		glyph := strings.Repeat(string(cells[i]&^borrowedCell), j-i)
		b.WriteString(p.paint(cellStyle(cells[i], l), glyph))
		i = j
	}
	return b.String()
}

func cellStyle(r rune, l *legend) string {
	if r&borrowedCell != 0 {
		style := cellStyle(r&^borrowedCell, l)
		if style == "" || style == sgrBold {
			return sgrBold
		}
		// "\x1b[30;42m" becomes "\x1b[30;42;1;4m": the claim's colour, bold
		// and underlined.
		return strings.TrimSuffix(style, "m") + sgrBorrowed + "m"
	}
	switch r {
	case burstGlyph:
		return sgrBurst
	case freeGlyph:
		return sgrDim
	case otherGlyph:
		return sgrBold
	}
	if l.usage != nil && unicode.IsLower(r) {
		// A claim's unused guarantee: its colour, but not filled.
		if i := strings.IndexRune(glyphs, unicode.ToUpper(r)); i >= 0 && i < len(l.entries) {
			return claimUnusedColours[i%len(claimUnusedColours)]
		}
	}
	if i := strings.IndexRune(glyphs, r); i >= 0 && i < len(l.entries) {
		return claimColour(i)
	}
	return ""
}
