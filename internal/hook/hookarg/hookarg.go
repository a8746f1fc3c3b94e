// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hookarg is the wire format of gpufrac-cdi-hook's per-GPU limit
// argument, `--gpu UUID=SOFT:HARD` in bytes: the one place that writes it
// (internal/node/cdispec, into the CDI spec's hook) and parses it
// (gpufrac-cdi-hook, and the kubelet stand-in that checks every hook it
// runs). It imports nothing beyond the standard library, so the CDI spec
// writer does not link the hook's NVML code.
package hookarg

import (
	"fmt"
	"strconv"
	"strings"
)

// Flag is the hook's flag that carries one GPU's limits; it repeats, once
// per GPU.
const Flag = "--gpu"

// Limit is one GPU's limits for the container, in bytes.
type Limit struct {
	UUID string `json:"uuid"`
	Soft uint64 `json:"soft"`
	Hard uint64 `json:"hard"`
}

// FormatLimit writes l as the hook argument UUID=SOFT:HARD.
func FormatLimit(l Limit) string {
	return fmt.Sprintf("%s=%d:%d", l.UUID, l.Soft, l.Hard)
}

// ParseLimit reads the hook argument form UUID=SOFT:HARD.
func ParseLimit(s string) (Limit, error) {
	uuid, rest, ok := strings.Cut(s, "=")
	softStr, hardStr, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 || uuid == "" {
		return Limit{}, fmt.Errorf(Flag+" %q: want UUID=SOFT:HARD in bytes", s)
	}
	soft, err := strconv.ParseUint(softStr, 10, 64)
	if err != nil {
		return Limit{}, fmt.Errorf(Flag+" %q: soft limit %q is not a number of bytes", s, softStr)
	}
	hard, err := strconv.ParseUint(hardStr, 10, 64)
	if err != nil {
		return Limit{}, fmt.Errorf(Flag+" %q: hard limit %q is not a number of bytes", s, hardStr)
	}
	if hard == 0 {
		return Limit{}, fmt.Errorf(Flag+" %q: hard limit 0 would leave the container no GPU memory at all", s)
	}
	if soft > hard {
		return Limit{}, fmt.Errorf(Flag+" %q: soft limit %d is above hard limit %d", s, soft, hard)
	}
	return Limit{UUID: uuid, Soft: soft, Hard: hard}, nil
}
