// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package flagcheck holds the rules every gpufrac binary applies to its
// flags at start, so a bad value is refused before anything runs, with
// the flag, the value and the rule, and the same kind of flag means the
// same rule in every binary. It imports only the standard library and
// apimachinery's name validation.
package flagcheck

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// All joins the errors of a binary's checks: every bad flag is named at
// once, not one per start.
func All(errs ...error) error {
	return errors.Join(errs...)
}

// DNSLabel checks a namespace or Service name (RFC 1123 label, as the API
// server validates them).
func DNSLabel(flag, value string) error {
	if msgs := validation.IsDNS1123Label(value); len(msgs) > 0 {
		return fmt.Errorf("%s %q: must be a DNS label (what the API server takes for this name): %s", flag, value, strings.Join(msgs, "; "))
	}
	return nil
}

// DNSSubdomain checks a node, Secret, ConfigMap, DeviceClass or webhook
// configuration name (RFC 1123 subdomain, as the API server validates
// them: node names may hold dots).
func DNSSubdomain(flag, value string) error {
	if msgs := validation.IsDNS1123Subdomain(value); len(msgs) > 0 {
		return fmt.Errorf("%s %q: must be a DNS subdomain (what the API server takes for this name): %s", flag, value, strings.Join(msgs, "; "))
	}
	return nil
}

// OptionalDNSSubdomain is DNSSubdomain where empty turns the thing off.
func OptionalDNSSubdomain(flag, value string) error {
	if value == "" {
		return nil
	}
	return DNSSubdomain(flag, value)
}

// AbsPath checks a path the binary must not resolve against its working
// directory (which the kubelet, the runtime or a shell chose).
func AbsPath(flag, value string) error {
	if !filepath.IsAbs(value) {
		return fmt.Errorf("%s %q: must be an absolute path (a relative one depends on the working directory the process was started in)", flag, value)
	}
	return nil
}

// OptionalAbsPath is AbsPath where empty turns the thing off.
func OptionalAbsPath(flag, value string) error {
	if value == "" {
		return nil
	}
	return AbsPath(flag, value)
}

// OneOf checks a choice among allowed values.
func OneOf(flag, value string, allowed ...string) error {
	if !slices.Contains(allowed, value) {
		return fmt.Errorf("%s %q: must be one of %s", flag, value, strings.Join(allowed, ", "))
	}
	return nil
}

// Duration checks a wait or delay from lo to hi, both included.
func Duration(flag string, value, lo, hi time.Duration) error {
	if value < lo || value > hi {
		return fmt.Errorf("%s %s: must be from %s to %s", flag, value, lo, hi)
	}
	return nil
}

// Lifetime checks a lifetime of at least floor (why says what a shorter one
// does) and at most hi.
func Lifetime(flag string, value, floor, hi time.Duration, why string) error {
	if value < floor {
		return fmt.Errorf("%s %s: must be at least %s: %s", flag, value, floor, why)
	}
	if value > hi {
		return fmt.Errorf("%s %s: must be at most %s", flag, value, hi)
	}
	return nil
}

// Int checks a count from lo to hi, both included.
func Int(flag string, value, lo, hi int64) error {
	if value < lo || value > hi {
		return fmt.Errorf("%s %d: must be from %d to %d", flag, value, lo, hi)
	}
	return nil
}

// Rate checks a rate from lo to hi, both included (NaN is neither).
func Rate(flag string, value, lo, hi float64) error {
	if !(value >= lo && value <= hi) {
		return fmt.Errorf("%s %v: must be from %v to %v", flag, value, lo, hi)
	}
	return nil
}

// Client-go's queries per second and burst to the API server: at least
// one (zero makes client-go use its default of 5, negative turns the
// limiter off), and at most far past what any gpufrac binary needs
// (inferred: kube-scheduler's defaults are 50 and 100), so a typo does
// not turn a binary into a load on the API server.
const (
	MaxKubeAPIQPS   = 10000
	MaxKubeAPIBurst = 100000
)

// KubeAPI checks the --kube-api-qps and --kube-api-burst pair.
func KubeAPI(qps float32, burst int) error {
	return All(Rate("--kube-api-qps", float64(qps), 1, MaxKubeAPIQPS), Int("--kube-api-burst", int64(burst), 1, MaxKubeAPIBurst))
}
