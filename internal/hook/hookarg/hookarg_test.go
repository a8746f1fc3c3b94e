// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package hookarg_test

import (
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
)

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct{ in, err string }{
		{"GPU-1=1024:2048", ""},
		{"GPU-1", `--gpu "GPU-1": want UUID=SOFT:HARD in bytes`},
		{"GPU-1=10", `--gpu "GPU-1=10": want UUID=SOFT:HARD in bytes`},
		{"GPU-1=x:2", `--gpu "GPU-1=x:2": soft limit "x" is not a number of bytes`},
		{"GPU-1=1:40Gi", `--gpu "GPU-1=1:40Gi": hard limit "40Gi" is not a number of bytes`},
		{"GPU-1=3:2", `--gpu "GPU-1=3:2": soft limit 3 is above hard limit 2`},
		{"GPU-1=0:0", `--gpu "GPU-1=0:0": hard limit 0 would leave the container no GPU memory at all`},
	} {
		l, err := hookarg.ParseLimit(tc.in)
		if tc.err == "" {
			if err != nil || l != (hookarg.Limit{UUID: "GPU-1", Soft: 1024, Hard: 2048}) {
				t.Errorf("ParseLimit(%q) = %+v, %v", tc.in, l, err)
			}
			continue
		}
		if err == nil || err.Error() != tc.err {
			t.Errorf("ParseLimit(%q) error %v, want %q", tc.in, err, tc.err)
		}
	}
}

// TestFormatLimitRoundTrips: what the CDI spec writer formats, the hook
// parses back to the same limits, for the limits a plan can hold (a real
// GPU UUID, soft at or below hard, up to the largest byte count).
func TestFormatLimitRoundTrips(t *testing.T) {
	for _, l := range []hookarg.Limit{
		{UUID: "GPU-8e0f5b2c-1d1a-4c3e-9f6a-0a1b2c3d4e5f", Soft: 40 << 30, Hard: 60 << 30},
		{UUID: "GPU-1", Soft: 0, Hard: 1},
		{UUID: "GPU-1", Soft: 1 << 20, Hard: 1 << 20},
		{UUID: "MIG-1", Soft: 1<<64 - 1, Hard: 1<<64 - 1},
	} {
		s := hookarg.FormatLimit(l)
		back, err := hookarg.ParseLimit(s)
		if err != nil || back != l {
			t.Errorf("FormatLimit(%+v) = %q, parsed back as %+v, %v", l, s, back, err)
		}
	}
	if got := hookarg.FormatLimit(hookarg.Limit{UUID: "GPU-1", Soft: 1024, Hard: 2048}); got != "GPU-1=1024:2048" {
		t.Errorf("FormatLimit = %q, want GPU-1=1024:2048", got)
	}
}

// FuzzParseLimit: an accepted --gpu value round-trips through FormatLimit
// and never has soft above hard.
func FuzzParseLimit(f *testing.F) {
	for _, seed := range []string{"GPU-1=1024:2048", "x=0:0", "=1:2", "a=2:1", "a=1:2:3", "a=18446744073709551615:18446744073709551615",
		"a=9223372036854775807:9223372036854775808", "a=18446744073709551616:1", "a=1:18446744073709551616", "a=-1:1", "a=0:1", "a=1:0"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := hookarg.ParseLimit(s)
		if err != nil {
			return
		}
		if l.Soft > l.Hard || l.Hard == 0 || l.UUID == "" || strings.Contains(l.UUID, "=") {
			t.Fatalf("ParseLimit(%q) = %+v", s, l)
		}
		back, err := hookarg.ParseLimit(hookarg.FormatLimit(l))
		if err != nil || back != l {
			t.Fatalf("round trip of %+v: %+v %v", l, back, err)
		}
	})
}
