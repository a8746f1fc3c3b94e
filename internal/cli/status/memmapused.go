// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"unicode"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

// UsageKey names one claim's share of one GPU as the plugin's metrics do:
// the node, the GPU's UUID (gpu_uuid) and the claim's UID (claim_uid).
type UsageKey struct{ Node, GPU, ClaimUID string }

// Usage is the memory, in bytes, each claim uses on each GPU: the sum of
// its containers' gpufrac_container_gpu_memory_used_bytes.
type Usage map[UsageKey]int64

// of is the claim's use of the GPU, and whether any series reported it.
func (u Usage) of(g GPU, c Claim) (int64, bool) {
	v, ok := u[UsageKey{Node: g.Node, GPU: g.UUID, ClaimUID: c.UID}]
	return v, ok
}

// mapKeyUsed is the key of a map that draws used memory.
var mapKeyUsed = []string{"A-Z: a claim's guarantee, in use", "a-z: its guarantee, unused",
	"A-Z past the blocks: used above the request (borrowing)", "~ free, within a limit (burst room)",
	". free, beyond every limit", "> limits or use reach past the GPU", "! tainted GPU", "[ ] MIG instance, held whole",
	"each bar is its GPU's memory"}

// usageNote says where the used memory came from or why none is drawn:
// status reads the API server, which holds no usage; the plugin's metrics
// do, and only a Prometheus that scrapes them can say.
func usageNote(o MapOptions) string {
	const metric = "gpufrac_container_gpu_memory_used_bytes"
	switch {
	case o.Usage != nil:
		return "Used memory: " + metric + " as the Prometheus at " + safetext.Escape(o.UsageFrom) +
			" last scraped it; '-' where it has no series."
	case o.UsageErr != "":
		return "Used memory is not drawn: querying the Prometheus at " + safetext.Escape(o.UsageFrom) +
			" failed: " + safetext.Escape(o.UsageErr)
	}
	return "Used memory is not drawn: status reads ResourceSlices and ResourceClaims, which record no usage; " +
		"the plugin's " + metric + " has it (--prometheus-url reads it from a Prometheus that scrapes the plugins)."
}

// usedGlyphs is how many claims of a node get glyphs of their own when
// used memory is drawn: the upper-case letters, whose lower case draws
// the unused guarantee; the claims past them share '*'.
const usedGlyphs = 26

// borrowedCell marks, in a bar's cells, a borrower's glyph drawn over the
// burst room: printed as the glyph, coloured apart (sgrBorrowed), so that
// on a terminal a borrower's use reads apart from its own block even where
// the two touch. Glyphs are ASCII, so the bit is never a glyph's own.
const borrowedCell rune = 1 << 20

// sgrBorrowed is added to a borrower's colour over the burst room.
const sgrBorrowed = ";1;4"

// unusedGlyph is the glyph of a claim's unused guarantee.
func unusedGlyph(r rune) rune {
	if r == otherGlyph {
		return r
	}
	return unicode.ToLower(r)
}
