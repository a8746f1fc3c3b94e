// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// MinMapWidth is the narrowest map Map draws; a narrower width is raised
// to it (below it a bar would have no room for a share).
const MinMapWidth = 40

// MapOptions say how wide the map is and whether it is coloured.
type MapOptions struct {
	// Width is the number of columns no line may exceed.
	Width int
	// Colour adds ANSI colours (SGR sequences only). The caller decides: a
	// terminal, and NO_COLOR unset.
	Colour bool
	// Usage is the memory each claim uses on each GPU (the plugin's
	// gpufrac_container_gpu_memory_used_bytes, read from a Prometheus);
	// nil: used memory is not drawn, and the map says why.
	Usage Usage
	// UsageFrom names where Usage was read (or was to be read); UsageErr
	// says why reading it failed. Both are printed under the map.
	UsageFrom, UsageErr string
}

// glyphs name the claims of a node; claims past them share '*'.
const glyphs = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// The cells that are no claim's.
const (
	burstGlyph = '~' // limits above requests: memory a borrower may take
	freeGlyph  = '.' // neither guaranteed nor within any limit
	overGlyph  = '>' // closes a bar whose limits reach past the GPU
	otherGlyph = '*' // a claim past the glyphs
)

// SGR colours; claims cycle through the backgrounds.
const (
	sgrReset = "\x1b[0m"
	sgrBold  = "\x1b[1m"
	sgrDim   = "\x1b[2m"
	sgrBurst = "\x1b[33m"
	sgrBad   = "\x1b[1;31m"
	sgrMIG   = "\x1b[36m"
)

var claimColours = []string{"\x1b[30;42m", "\x1b[30;44m", "\x1b[30;45m", "\x1b[30;46m", "\x1b[30;43m", "\x1b[30;41m",
	"\x1b[30;102m", "\x1b[30;104m", "\x1b[30;105m", "\x1b[30;106m", "\x1b[30;103m", "\x1b[30;101m"}

// claimUnusedColours draw a claim's unused guarantee: its colour as the
// letters', on no background.
var claimUnusedColours = []string{"\x1b[32m", "\x1b[34m", "\x1b[35m", "\x1b[36m", "\x1b[33m", "\x1b[31m",
	"\x1b[92m", "\x1b[94m", "\x1b[95m", "\x1b[96m", "\x1b[93m", "\x1b[91m"}

// Fixed columns of a GPU line: indent, the mark between device and size,
// the size, the bar's two ends and the spaces around them.
const (
	sizeCols   = 6
	suffixCols = 14 // "TAINTED XID-79", "MIG 3g.40gb", "141Gi free"
	minSuffix  = 9  // narrower, the suffix is left out
	lineFixed  = 2 + 3 + sizeCols + 1 + 2
	minBar     = 10
	maxDevCols = 16
)

// layout is the columns of a map's GPU lines.
type layout struct{ dev, bar, suffix int }

// layoutFor gives the bar what the device names and the suffix leave; when
// the width is short the suffix shrinks (and goes), then the names.
func layoutFor(gpus []GPU, width int) layout {
	l := layout{suffix: suffixCols}
	for _, g := range gpus {
		l.dev = max(l.dev, utf8.RuneCountInString(safetext.Escape(g.Device)))
	}
	l.dev = min(l.dev, maxDevCols)
	room := width - lineFixed - l.dev
	if room-minBar < suffixCols+1 {
		l.suffix = room - minBar - 1
		if l.suffix < minSuffix {
			l.suffix = -1 // no suffix, no space before it
		}
	}
	l.bar = room - l.suffix - 1
	if l.bar < minBar {
		l.dev, l.bar = max(1, l.dev-(minBar-l.bar)), minBar
	}
	return l
}

// Map draws gpus (Build's result) as a memory map, one line per GPU: each
// claim's guaranteed share as a block of its glyph, the burst room the
// limits allow above the requests, and the free memory; per node a legend
// of the glyphs; then the pools' fragmentation. Every line fits o.Width
// columns. Names are escaped (safetext), so the map may go to a terminal
// raw: its only control sequences are its own colours.
func Map(gpus []GPU, pools []fragmentation.Pool, o MapOptions) string {
	width := max(o.Width, MinMapWidth)
	p := painter{colour: o.Colour}
	var b strings.Builder
	line := func(s string) { b.WriteString(s); b.WriteByte('\n') }
	key := mapKey
	if o.Usage != nil {
		key = mapKeyUsed
	}
	for _, l := range wrap(key, width) {
		line(l)
	}
	cols := layoutFor(gpus, width)
	for start := 0; start < len(gpus); {
		end := start
		for end < len(gpus) && gpus[end].Node == gpus[start].Node {
			end++
		}
		node := gpus[start:end]
		line(p.paint(sgrBold, fit(safetext.Escape(node[0].Node), width)))
		legend := newLegend(node, o.Usage)
		for _, g := range node {
			line(gpuLine(p, g, legend, cols))
		}
		for _, l := range legend.lines(p, width) {
			line(l)
		}
		start = end
	}
	for _, l := range poolLines(pools, width) {
		line(l)
	}
	for _, l := range wrap([]string{usageNote(o)}, width) {
		line(l)
	}
	return b.String()
}

// mapKey says what the cells mean; wrap lays it out to the width.
var mapKey = []string{"A-Z a-z 0-9: a claim's guaranteed memory", "~ free, within a limit (burst room)",
	". free, beyond every limit", "> limits reach past the GPU", "! tainted GPU", "[ ] MIG instance, held whole", "each bar is its GPU's memory"}

// gpuLine is one GPU: device, mark, size, bar, and what is free or wrong.
func gpuLine(p painter, g GPU, l *legend, cols layout) string {
	mark, markStyle, suffix, suffixStyle := " ", "", short(max(0, g.Memory-g.Guaranteed))+" free", sgrDim
	if g.Type == domain.DeviceTypeMIG {
		suffix, suffixStyle = "MIG "+g.Profile, sgrMIG
		if len(g.Claims) == 0 {
			suffix = "MIG free"
		}
	}
	if len(g.Taints) > 0 {
		mark, markStyle, suffix, suffixStyle = "!", sgrBad, "TAINTED "+taintReason(g.Taints[0]), sgrBad
	}
	dev := fit(safetext.Escape(g.Device), cols.dev)
	head := fmt.Sprintf("  %-*s %s %*s ", cols.dev, dev, p.paint(markStyle, mark), sizeCols, short(g.Memory))
	open, closing, edge := "|", "|", ""
	if g.Type == domain.DeviceTypeMIG {
		open, closing, edge = "[", "]", sgrMIG
	}
	cells, over := barCells(g, l, cols.bar)
	if over {
		closing = string(overGlyph)
	}
	s := head + p.paint(edge, open) + p.cells(cells, l) + p.paint(edge, closing)
	if cols.suffix < 0 {
		return s
	}
	return s + " " + p.paint(suffixStyle, fit(safetext.Escape(suffix), cols.suffix))
}

// barCells apportions the bar: the claims' guaranteed blocks in order
// (with usage known, each block's used part in the claim's glyph and its
// unused part in the glyph's lower case), the memory claims use above
// their requests (borrowing, in their glyphs, over the burst room), the
// burst room left, the free rest. over: the limits, the use or (on a
// hostile status) the guarantees reach past the GPU's memory.
func barCells(g GPU, l *legend, bar int) ([]rune, bool) {
	var sizes, borrows []int64
	var glyph, borrowGlyphs []rune
	var guaranteed, burst, borrowed int64
	for _, c := range g.Claims {
		if c.Invalid != "" {
			continue
		}
		r := l.glyph(c)
		guaranteed += c.Request
		burst += max(0, c.Limit-c.Request)
		if l.usage == nil {
			sizes, glyph = append(sizes, c.Request), append(glyph, r)
			continue
		}
		used, _ := l.usage.of(g, c)
		in := min(used, c.Request)
		sizes, glyph = append(sizes, in, c.Request-in), append(glyph, r, unusedGlyph(r))
		borrows, borrowGlyphs = append(borrows, max(0, used-c.Request)), append(borrowGlyphs, r|borrowedCell)
		borrowed += max(0, used-c.Request)
	}
	total := max(g.Memory, guaranteed+borrowed)
	room := max(borrowed, min(burst, total-guaranteed))
	sizes = append(append(sizes, borrows...), room-borrowed, total-guaranteed-room)
	glyph = append(append(glyph, borrowGlyphs...), burstGlyph, freeGlyph)
	var cells []rune
	for i, n := range apportion(sizes, bar) {
		cells = append(cells, []rune(strings.Repeat(string(glyph[i]), n))...)
	}
	return cells, guaranteed+max(burst, borrowed) > g.Memory
}

// apportion splits width cells among sizes in proportion, every non-zero
// size at least one cell while the width allows, the cells summing to the
// width (largest remainders get the cells rounding leaves).
func apportion(sizes []int64, width int) []int {
	cells := make([]int, len(sizes))
	var total float64
	for _, s := range sizes {
		total += float64(max(0, s))
	}
	if total == 0 || width <= 0 {
		return cells
	}
	rest := make([]float64, len(sizes))
	used := 0
	for i, s := range sizes {
		exact := float64(max(0, s)) * float64(width) / total
		cells[i], rest[i] = int(exact), exact-float64(int(exact))
		if s > 0 && cells[i] == 0 {
			cells[i], rest[i] = 1, 0
		}
		used += cells[i]
	}
	for ; used < width; used++ {
		i := argmax(rest)
		cells[i]++
		rest[i] = -1
	}
	for ; used > width; used-- {
		// The minimum of one cell overfilled the bar (more shares than
		// cells): the largest gives, the last of equals first, so the
		// first claims keep their cells.
		i := len(cells) - 1
		for j := len(cells) - 1; j >= 0; j-- {
			if cells[j] > cells[i] {
				i = j
			}
		}
		if cells[i] == 0 {
			break
		}
		cells[i]--
	}
	return cells
}

// argmax is the first index of the largest value.
func argmax(v []float64) int {
	best := 0
	for i := range v {
		if v[i] > v[best] {
			best = i
		}
	}
	return best
}

// taintReason is a status taint's value ("key=value:effect"), or its key
// when it has none.
func taintReason(t string) string {
	_, rest, ok := strings.Cut(t, "=")
	if !ok {
		key, _, _ := strings.Cut(t, ":")
		return key
	}
	value, _, _ := strings.Cut(rest, ":")
	return value
}

// poolLines are the fragmentation lines of the pools that hold shares.
func poolLines(pools []fragmentation.Pool, width int) []string {
	var out []string
	for _, p := range pools {
		if p.InUse == 0 {
			continue
		}
		s := fmt.Sprintf("pool %q: %d GPUs hold shares, at least %d needed", p.Name, p.InUse, p.LowerBound)
		if p.Freeable > 0 {
			s += fmt.Sprintf("; %d would free up if their shares moved", p.Freeable)
		}
		out = append(out, wrap([]string{s}, width)...)
	}
	return out
}

// short is a size in at most six columns: 141Gi, 9.5Gi, 512Mi.
func short(b int64) string {
	const mi, gi = int64(1) << 20, int64(1) << 30
	switch {
	case b >= 1000*gi:
		return fmt.Sprintf("%dTi", (b+gi<<9)>>40)
	case b >= 10*gi || (b >= gi && b%gi == 0):
		return fmt.Sprintf("%dGi", (b+gi/2)/gi)
	case b >= gi:
		return fmt.Sprintf("%.1fGi", float64(b)/float64(gi))
	default:
		return fmt.Sprintf("%dMi", (b+mi/2)/mi)
	}
}

// fit cuts s to cols columns, marking the cut with an ellipsis.
func fit(s string, cols int) string {
	if utf8.RuneCountInString(s) <= cols {
		return s
	}
	if cols <= 1 {
		return string([]rune(s)[:max(cols, 0)])
	}
	return string([]rune(s)[:cols-1]) + "…"
}

// wrap lays items out in lines of at most width columns, items joined by
// two spaces and kept whole where they fit a line; a longer item is broken
// at its spaces, a word longer than a line cut.
func wrap(items []string, width int) []string {
	var lines []string
	cur := ""
	add := func(sep, text string) {
		if cur != "" && utf8.RuneCountInString(cur)+len(sep)+utf8.RuneCountInString(text) > width {
			lines, cur = append(lines, cur), ""
		}
		if cur == "" {
			sep = ""
		}
		cur += sep + text
	}
	for _, item := range items {
		item = strings.Join(strings.Fields(item), " ")
		if utf8.RuneCountInString(item) <= width {
			add("  ", item)
			continue
		}
		for j, word := range strings.Fields(item) {
			sep := " "
			if j == 0 {
				sep = "  "
			}
			add(sep, fit(word, width))
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}
