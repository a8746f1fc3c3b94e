// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"os"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis of its own: fields
	// are counted from the last ')'. utime 250, stime 130 ticks.
	line := "4242 (kube (api) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 130 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3.8 {
		t.Errorf("parseStatCPU = %v, want 3.8 (380 ticks at 100 a second)", got)
	}
	for _, bad := range []string{"4242 kube S 1", "4242 (kube) S 1 2 3", "4242 (kube) S 1 4242 4242 0 -1 4194560 100 0 0 0 x 130 0"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) accepted a malformed line", bad)
		}
	}
}

func TestOwnCPUSecondsGrow(t *testing.T) {
	before, err := processCPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel's accounting (10 ms ticks) moves.
	x := 0
	for i := 0; ; i++ {
		x += i % 7
		if i%1_000_000 != 0 {
			continue
		}
		after, err := processCPUSeconds(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
		if i > 2_000_000_000 {
			t.Fatalf("this process's CPU time stayed at %v s (x=%d)", before, x)
		}
	}
}
