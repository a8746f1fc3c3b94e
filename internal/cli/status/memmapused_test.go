// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"fmt"
	"strings"
	"testing"
)

// sampleUsage: team/llm uses 50Gi of its 40Gi request (borrowing 10Gi of
// its 60Gi limit), team/small 5Gi of 20Gi, ml/trainer 30Gi of its MIG
// instance; ml/stuck has no series.
func sampleUsage() Usage {
	return Usage{
		{Node: "node-a", GPU: "GPU-a0", ClaimUID: "uid-llm"}:     50 * gi,
		{Node: "node-a", GPU: "GPU-a0", ClaimUID: "uid-small"}:   5 * gi,
		{Node: "node-b", GPU: "MIG-b0", ClaimUID: "uid-trainer"}: 30 * gi,
		// Another node's claim of the same UID is not this one's.
		{Node: "node-z", GPU: "GPU-a1", ClaimUID: "uid-stuck"}: 9 * gi,
	}
}

func TestMapUsageGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width int
		want  string
	}{{
		// gpu-0, 38 cells of 141Gi: llm's 40Gi used 10.78 (11), small's
		// 5Gi used 1.35 (1) and 15Gi unused 4.04 (4), llm's 10Gi borrowed
		// 2.70 (3), the 10Gi of burst room left 2.70 (3), 61Gi free 16.44
		// (16). The MIG instance: 30Gi used 28.5 (29), 10Gi unused 9.5 (9).
		name: "80 columns", width: 80,
		want: `A-Z: a claim's guarantee, in use  a-z: its guarantee, unused
A-Z past the blocks: used above the request (borrowing)
~ free, within a limit (burst room)  . free, beyond every limit
> limits or use reach past the GPU  ! tainted GPU  [ ] MIG instance, held whole
each bar is its GPU's memory
node-a
  gpu-0            141Gi |AAAAAAAAAAABbbbbAAA~~~................| 81Gi free
  gpu-1         !  141Gi |ccc...................................| TAINTED XID-79
    request   limit    used  claim (GPUs)
  A    40Gi    60Gi    50Gi  team/llm (gpu-0) borrows 10Gi
  B    20Gi    20Gi     5Gi  team/small (gpu-0)
  C    10Gi    10Gi       -  ml/stuck (gpu-1)
node-b
  gpu-0-mig-0-0     40Gi [AAAAAAAAAAAAAAAAAAAAAAAAAAAAAaaaaaaaaa] MIG 3g.40gb
  gpu-0-mig-1-0     10Gi [......................................] MIG free
    request   limit    used  claim (GPUs)
  A    40Gi    40Gi    30Gi  ml/trainer (gpu-0-mig-0-0)
Used memory: gpufrac_container_gpu_memory_used_bytes as the Prometheus at
http://prom:9090 last scraped it; '-' where it has no series.
`,
	}, {
		// 13 cells: every non-zero part keeps one, llm's used part takes
		// the cell rounding leaves; borrowing still shows past B's block.
		name: "40 columns", width: 40,
		want: `A-Z: a claim's guarantee, in use
a-z: its guarantee, unused  A-Z past the
blocks: used above the request
(borrowing)
~ free, within a limit (burst room)
. free, beyond every limit
> limits or use reach past the GPU
! tainted GPU
[ ] MIG instance, held whole
each bar is its GPU's memory
node-a
  gpu-0            141Gi |AAAABbA~.....|
  gpu-1         !  141Gi |c............|
    request   limit    used  claim (GPU…
  A    40Gi    60Gi    50Gi  team/llm (…
  B    20Gi    20Gi     5Gi  team/small…
  C    10Gi    10Gi       -  ml/stuck (…
node-b
  gpu-0-mig-0-0     40Gi [AAAAAAAAAAaaa]
  gpu-0-mig-1-0     10Gi [.............]
    request   limit    used  claim (GPU…
  A    40Gi    40Gi    30Gi  ml/trainer…
Used memory:
gpufrac_container_gpu_memory_used_bytes
as the Prometheus at http://prom:9090
last scraped it; '-' where it has no
series.
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Map(sampleGPUs(), nil, MapOptions{Width: tc.width, Usage: sampleUsage(), UsageFrom: "http://prom:9090"})
			if got != tc.want {
				t.Errorf("map at %d columns:\n%s\nwant:\n%s", tc.width, got, tc.want)
			}
			checkWidth(t, got, tc.width)
		})
	}
}

// A failed query is said, URL and error escaped, and the map is drawn as
// without usage.
func TestMapUsageFailed(t *testing.T) {
	got := Map(sampleGPUs(), nil, MapOptions{Width: 80, UsageFrom: "http://prom:9090", UsageErr: "bad_data: parse error\x1b[2J"})
	without := Map(sampleGPUs(), nil, MapOptions{Width: 80})
	want := "Used memory is not drawn: querying the Prometheus at http://prom:9090 failed:\nbad_data: parse error\\x1b[2J\n"
	if !strings.HasSuffix(got, want) {
		t.Errorf("failed query's note: got\n%s\nwant it to end\n%s", got, want)
	}
	if strings.TrimSuffix(got, want) != strings.TrimSuffix(without, used80) {
		t.Errorf("the map above the note differs from the map without usage:\n%s\n%s", got, without)
	}
}

// Use past the GPU (a borrower over hostile or stale figures) closes the
// bar with '>'; claims past the 26 upper-case letters share '*'.
func TestMapUsageOverAndMany(t *testing.T) {
	g := GPU{Node: "n", Device: "gpu-0", UUID: "U", Type: "gpu", Memory: 80 * gi, Guaranteed: 60 * gi, Claims: []Claim{
		{Namespace: "a", Name: "big", UID: "b", Request: 60 * gi, Limit: 70 * gi, Prepared: true}}}
	out := Map([]GPU{g}, nil, MapOptions{Width: 80, Usage: Usage{{"n", "U", "b"}: 100 * gi}, UsageFrom: "p"})
	if !strings.Contains(out, "|"+strings.Repeat("A", 46)+"> 20Gi free") {
		t.Errorf("use past the GPU is not drawn over the bar's end:\n%s", out)
	}
	// Coloured, the 60Gi block (28 of the 46 cells) and the 40Gi borrowed
	// (18) touch, and read apart.
	coloured := Map([]GPU{g}, nil, MapOptions{Width: 80, Colour: true, Usage: Usage{{"n", "U", "b"}: 100 * gi}, UsageFrom: "p"})
	if want := "\x1b[30;42m" + strings.Repeat("A", 28) + "\x1b[0m\x1b[30;42;1;4m" + strings.Repeat("A", 18) + "\x1b[0m>"; !strings.Contains(coloured, want) {
		t.Errorf("coloured, the borrowed cells are not apart from the block: want %q in\n%q", want, coloured)
	}
	many := GPU{Node: "n", Device: "gpu-0", UUID: "U", Type: "gpu", Memory: 141 * gi}
	u := Usage{}
	for i := range 27 {
		uid := fmt.Sprint(i)
		many.Claims = append(many.Claims, Claim{Namespace: "n", Name: "c" + uid, UID: uid, Request: gi, Limit: gi, Prepared: true})
		u[UsageKey{"n", "U", uid}] = gi / 2
	}
	out = Map([]GPU{many}, nil, MapOptions{Width: 120, Usage: u, UsageFrom: "p"})
	if !strings.Contains(out, "|AaBbCc") || !strings.Contains(out, "Zz**") || !strings.Contains(out, "\n  *     1Gi     1Gi   512Mi  n/c26") {
		t.Errorf("27 claims: want A-Z then '*':\n%s", out)
	}
	checkWidth(t, out, 120)
}

// Coloured, the used part is the claim's filled colour, the unused
// guarantee its colour on no background, the borrowed part filled, bold
// and underlined (apart from the block it may touch); without the SGR the
// map is the plain one.
func TestMapUsageColour(t *testing.T) {
	o := MapOptions{Width: 80, Usage: sampleUsage(), UsageFrom: "http://prom:9090"}
	plain := Map(sampleGPUs(), nil, o)
	o.Colour = true
	coloured := Map(sampleGPUs(), nil, o)
	if sgr.ReplaceAllString(coloured, "") != plain {
		t.Errorf("coloured map is not the plain one plus SGR:\n%q\nplain:\n%q", coloured, plain)
	}
	for _, want := range []string{"\x1b[30;42mAAAAAAAAAAA\x1b[0m\x1b[30;44mB\x1b[0m\x1b[34mbbbb\x1b[0m\x1b[30;42;1;4mAAA\x1b[0m\x1b[33m~~~\x1b[0m",
		"\x1b[35mccc\x1b[0m", "\x1b[30;42mAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\x1b[0m\x1b[32maaaaaaaaa\x1b[0m"} {
		if !strings.Contains(coloured, want) {
			t.Errorf("coloured map lacks %q:\n%q", want, coloured)
		}
	}
}
