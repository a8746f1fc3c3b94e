// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpufrac/gpufrac/internal/core/fragmentation"
)

const gi = int64(1) << 30

// sampleGPUs is a node of two H200s (one shared by two claims, one
// tainted with a claim still on it) and a node with a MIG instance held
// whole beside a free one.
func sampleGPUs() []GPU {
	return []GPU{
		{Node: "node-a", Device: "gpu-0", UUID: "GPU-a0", Type: "gpu", Memory: 141 * gi, Guaranteed: 60 * gi, LimitSum: 80 * gi, Claims: []Claim{
			{Namespace: "team", Name: "llm", UID: "uid-llm", Request: 40 * gi, Limit: 60 * gi, Prepared: true},
			{Namespace: "team", Name: "small", UID: "uid-small", Request: 20 * gi, Limit: 20 * gi, Prepared: true}}},
		{Node: "node-a", Device: "gpu-1", UUID: "GPU-a1", Type: "gpu", Memory: 141 * gi, Guaranteed: 10 * gi, LimitSum: 10 * gi,
			Taints: []string{"gpufrac.dev/unhealthy=XID-79:NoSchedule"}, Claims: []Claim{
				{Namespace: "ml", Name: "stuck", UID: "uid-stuck", Request: 10 * gi, Limit: 10 * gi, Prepared: true}}},
		{Node: "node-b", Device: "gpu-0-mig-0-0", UUID: "MIG-b0", Type: "mig", Profile: "3g.40gb", Memory: 40 * gi, Guaranteed: 40 * gi, LimitSum: 40 * gi,
			Claims: []Claim{{Namespace: "ml", Name: "trainer", UID: "uid-trainer", Request: 40 * gi, Limit: 40 * gi, Prepared: true}}},
		{Node: "node-b", Device: "gpu-0-mig-1-0", Type: "mig", Profile: "1g.10gb", Memory: 10 * gi},
	}
}

// overcommitted is one GPU whose limits reach past its memory, a share too
// small for a cell of its own, a share whose figure status refused, one
// not prepared yet and a monitor.
func overcommitted() []GPU {
	return []GPU{{Node: "n1", Device: "gpu-0", Type: "gpu", Memory: 80 * gi, Guaranteed: 61*gi + 256<<20, LimitSum: 200 * gi, Claims: []Claim{
		{Namespace: "a", Name: "big", Request: 50 * gi, Limit: 80 * gi, Prepared: true},
		{Namespace: "a", Name: "tiny", Request: 256 << 20, Limit: 256 << 20, Prepared: true},
		{Namespace: "b", Name: "new", Request: 11 * gi, Limit: 11 * gi},
		{Namespace: "b", Name: "odd", Invalid: "consumed memory 1e30 is outside (0, 80Gi], the GPU's memory", Prepared: true},
	}, Monitors: []Monitor{{Namespace: "ops", Name: "dcgm", Prepared: true}}}}
}

const key80 = `A-Z a-z 0-9: a claim's guaranteed memory  ~ free, within a limit (burst room)
. free, beyond every limit  > limits reach past the GPU  ! tainted GPU
[ ] MIG instance, held whole  each bar is its GPU's memory
`

const used80 = `Used memory is not drawn: status reads ResourceSlices and ResourceClaims, which
record no usage; the plugin's gpufrac_container_gpu_memory_used_bytes has it
(--prometheus-url reads it from a Prometheus that scrapes the plugins).
`

func TestMapGolden(t *testing.T) {
	pools := []fragmentation.Pool{{Name: "h200", InUse: 2, LowerBound: 1, Freeable: 1}, {Name: "idle"}}
	for _, tc := range []struct {
		name  string
		gpus  []GPU
		pools []fragmentation.Pool
		width int
		want  string
	}{{
		// gpu-0: 38 cells of 141Gi: 40Gi is 10.8 (11), 20Gi 5.4 (5), the
		// burst room 20Gi 5.4 (5), the free 61Gi 16.4 (17).
		name: "shares, a tainted GPU, MIG instances", gpus: sampleGPUs(), pools: pools, width: 80,
		want: key80 + `node-a
  gpu-0            141Gi |AAAAAAAAAAABBBBB~~~~~.................| 81Gi free
  gpu-1         !  141Gi |CCC...................................| TAINTED XID-79
    request   limit  claim (GPUs)
  A    40Gi    60Gi  team/llm (gpu-0)
  B    20Gi    20Gi  team/small (gpu-0)
  C    10Gi    10Gi  ml/stuck (gpu-1)
node-b
  gpu-0-mig-0-0     40Gi [AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA] MIG 3g.40gb
  gpu-0-mig-1-0     10Gi [......................................] MIG free
    request   limit  claim (GPUs)
  A    40Gi    40Gi  ml/trainer (gpu-0-mig-0-0)
pool "h200": 2 GPUs hold shares, at least 1 needed; 1 would free up if their
shares moved
` + used80,
	}, {
		// 40 columns: the suffix goes, the bar keeps 13 cells.
		name: "narrow", gpus: sampleGPUs(), width: 40,
		want: `A-Z a-z 0-9: a claim's guaranteed memory
~ free, within a limit (burst room)
. free, beyond every limit
> limits reach past the GPU
! tainted GPU
[ ] MIG instance, held whole
each bar is its GPU's memory
node-a
  gpu-0            141Gi |AAAABB~~.....|
  gpu-1         !  141Gi |C............|
    request   limit  claim (GPUs)
  A    40Gi    60Gi  team/llm (gpu-0)
  B    20Gi    20Gi  team/small (gpu-0)
  C    10Gi    10Gi  ml/stuck (gpu-1)
node-b
  gpu-0-mig-0-0     40Gi [AAAAAAAAAAAAA]
  gpu-0-mig-1-0     10Gi [.............]
    request   limit  claim (GPUs)
  A    40Gi    40Gi  ml/trainer (gpu-0-…
Used memory is not drawn: status reads
ResourceSlices and ResourceClaims, which
record no usage; the plugin's
gpufrac_container_gpu_memory_used_bytes
has it (--prometheus-url reads it from a
Prometheus that scrapes the plugins).
`,
	}, {
		// 36 cells of 80Gi: big 50Gi is 22.5 (22), tiny 0.1 gets one cell,
		// new 11Gi 4.95 (5); the burst room is the 18.75Gi left (8.4: 8),
		// no free cell, and '>' closes the bar: the limits reach 200Gi.
		name: "over-committed, tiny, invalid, not prepared, monitor", gpus: overcommitted(), width: 70,
		want: `A-Z a-z 0-9: a claim's guaranteed memory
~ free, within a limit (burst room)  . free, beyond every limit
> limits reach past the GPU  ! tainted GPU
[ ] MIG instance, held whole  each bar is its GPU's memory
n1
  gpu-0     80Gi |AAAAAAAAAAAAAAAAAAAAAABCCCCC~~~~~~~~> 19Gi free
    request   limit  claim (GPUs)
  A    50Gi    80Gi  a/big (gpu-0)
  B   256Mi   256Mi  a/tiny (gpu-0)
  C    11Gi    11Gi  b/new (gpu-0) gpu-0: not prepared yet, limit unk…
  D       -       -  b/odd (gpu-0) gpu-0: INVALID consumed memory 1e3…
  monitor ops/dcgm on gpu-0 (adminAccess: sees the GPU, holds no shar…
Used memory is not drawn: status reads ResourceSlices and
ResourceClaims, which record no usage; the plugin's
gpufrac_container_gpu_memory_used_bytes has it (--prometheus-url reads
it from a Prometheus that scrapes the plugins).
`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Map(tc.gpus, tc.pools, MapOptions{Width: tc.width})
			if got != tc.want {
				t.Errorf("map at %d columns:\n%s\nwant:\n%s", tc.width, got, tc.want)
			}
			checkWidth(t, got, tc.width)
		})
	}
}

// sgr is an SGR sequence, the only escape the map may print.
var sgr = regexp.MustCompile("\x1b\\[[0-9;]*m")

// checkWidth fails on a line wider than width columns (SGR not counted).
func checkWidth(t *testing.T, out string, width int) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if n := utf8.RuneCountInString(sgr.ReplaceAllString(l, "")); n > width {
			t.Errorf("%d columns, over %d: %q", n, width, l)
		}
	}
}

// Colours add SGR sequences and nothing else: without them the coloured
// map is the plain one, and a name's own escape stays escaped.
func TestMapColour(t *testing.T) {
	gpus := sampleGPUs()
	gpus[0].Claims[0].Name = "llm\x1b]0;owned\a"
	plain := Map(gpus, nil, MapOptions{Width: 80})
	coloured := Map(gpus, nil, MapOptions{Width: 80, Colour: true})
	if strings.Contains(plain, "\x1b") {
		t.Errorf("plain map has an escape:\n%q", plain)
	}
	if !strings.Contains(plain, `team/llm\x1b]0;owned\x07`) {
		t.Errorf("the hostile name is not shown escaped:\n%s", plain)
	}
	if coloured == plain || sgr.ReplaceAllString(coloured, "") != plain {
		t.Errorf("coloured map is not the plain one plus SGR:\n%q\nplain:\n%q", coloured, plain)
	}
	if rest := sgr.ReplaceAllString(coloured, ""); strings.Contains(rest, "\x1b") {
		t.Errorf("coloured map has an escape other than SGR: %q", rest)
	}
	// Each claim's block is one span of its colour; the tainted GPU's mark
	// and reason are red.
	for _, want := range []string{"\x1b[30;42mAAAAAAAAAAA\x1b[0m", "\x1b[30;44mBBBBB\x1b[0m", "\x1b[33m~~~~~\x1b[0m",
		"\x1b[1;31m!\x1b[0m", "\x1b[1;31mTAINTED XID-79\x1b[0m", "\x1b[36m[\x1b[0m"} {
		if !strings.Contains(coloured, want) {
			t.Errorf("coloured map lacks %q:\n%q", want, coloured)
		}
	}
}

// Every line fits the width asked, down to MinMapWidth, whatever the names'
// lengths; a claim past the 62 glyphs is drawn '*'; with more shares than
// cells, the first keep theirs.
func TestMapFitsWidth(t *testing.T) {
	long := strings.Repeat("n", 63)
	g := GPU{Node: strings.Repeat("node", 60), Device: "gpu-0-mig-12-34-and-more", Type: "gpu", Memory: 141 * gi,
		Taints: []string{"gpufrac.dev/unhealthy=" + strings.Repeat("x", 60) + ":NoExecute"}}
	for i := range 63 {
		g.Claims = append(g.Claims, Claim{Namespace: long, Name: fmt.Sprintf("%s-%d", long, i), Request: 2 * gi, Limit: 4 * gi, Prepared: true})
	}
	for _, width := range []int{120, 80, 60, 45, 40, 20} {
		for _, colour := range []bool{false, true} {
			out := Map(append(sampleGPUs(), g), nil, MapOptions{Width: width, Colour: colour})
			checkWidth(t, out, max(width, MinMapWidth))
		}
	}
	out := Map([]GPU{g}, nil, MapOptions{Width: 80})
	if !strings.Contains(out, "\n  *     2Gi     4Gi  nnn") || !strings.Contains(out, "|ABCDEFGHIJ") {
		t.Errorf("the 63rd claim is not drawn '*':\n%s", out)
	}
}

func TestApportion(t *testing.T) {
	for _, tc := range []struct {
		sizes []int64
		width int
		want  []int
	}{
		{[]int64{1, 1}, 10, []int{5, 5}},
		{[]int64{40, 20, 20, 61}, 38, []int{11, 5, 5, 17}},
		{[]int64{1, 1000}, 10, []int{1, 9}},               // a tiny share keeps one cell
		{[]int64{0, 5, 0}, 4, []int{0, 4, 0}},             // nothing gets no cell
		{[]int64{1, 1, 1, 1, 1}, 3, []int{1, 1, 1, 0, 0}}, // more shares than cells
		{[]int64{0, 0}, 8, []int{0, 0}},
	} {
		if got := apportion(tc.sizes, tc.width); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("apportion(%v, %d) = %v, want %v", tc.sizes, tc.width, got, tc.want)
		}
	}
}
