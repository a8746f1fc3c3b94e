// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package flagcheck_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/flagcheck"
)

func TestRules(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string // empty: accepted
	}{
		{"a namespace", flagcheck.DNSLabel("--namespace", "gpufrac-system"), ""},
		{"a namespace climbing out", flagcheck.DNSLabel("--namespace", "../etc"), `--namespace "../etc": must be a DNS label`},
		{"an empty namespace", flagcheck.DNSLabel("--namespace", ""), `--namespace "": must be a DNS label`},
		{"a node name with dots", flagcheck.DNSSubdomain("--node-name", "ip-10-0-0-1.ec2.internal"), ""},
		{"a node name climbing out", flagcheck.DNSSubdomain("--node-name", "../../etc"), `--node-name "../../etc": must be a DNS subdomain`},
		{"a node name in capitals", flagcheck.DNSSubdomain("--node-name", "Node1"), `--node-name "Node1": must be a DNS subdomain`},
		{"a node name of 254 characters", flagcheck.DNSSubdomain("--node-name", strings.Repeat("a", 254)), "must be no more than 253 characters"},
		{"an optional name left empty", flagcheck.OptionalDNSSubdomain("--packing-parameter", ""), ""},
		{"an optional name with a slash", flagcheck.OptionalDNSSubdomain("--packing-parameter", "a/b"), `--packing-parameter "a/b": must be a DNS subdomain`},
		{"an absolute path", flagcheck.AbsPath("--cdi-root", "/var/run/cdi"), ""},
		{"a relative path", flagcheck.AbsPath("--cdi-root", "cdi"), `--cdi-root "cdi": must be an absolute path`},
		{"an empty path", flagcheck.AbsPath("--cdi-root", ""), `--cdi-root "": must be an absolute path`},
		{"an optional path left empty", flagcheck.OptionalAbsPath("--cert-dir", ""), ""},
		{"an optional relative path", flagcheck.OptionalAbsPath("--cert-dir", "./certs"), `--cert-dir "./certs": must be an absolute path`},
		{"a choice", flagcheck.OneOf("--scope", "node", "gpu", "node"), ""},
		{"a choice not offered", flagcheck.OneOf("--scope", "rack", "gpu", "node"), `--scope "rack": must be one of gpu, node`},
		{"a duration in range", flagcheck.Duration("--x", time.Second, 0, time.Minute), ""},
		{"a duration at its bounds", flagcheck.All(flagcheck.Duration("--x", 0, 0, time.Minute), flagcheck.Duration("--x", time.Minute, 0, time.Minute)), ""},
		{"a negative duration", flagcheck.Duration("--x", -time.Second, 0, time.Minute), "--x -1s: must be from 0s to 1m0s"},
		{"a duration past its bound", flagcheck.Duration("--x", time.Hour, 0, time.Minute), "--x 1h0m0s: must be from 0s to 1m0s"},
		{"a lifetime under its floor", flagcheck.Lifetime("--cert-lifetime", time.Second, time.Hour, 24*time.Hour, "the reason"), "--cert-lifetime 1s: must be at least 1h0m0s: the reason"},
		{"a lifetime past its bound", flagcheck.Lifetime("--cert-lifetime", 48*time.Hour, time.Hour, 24*time.Hour, "r"), "--cert-lifetime 48h0m0s: must be at most 24h0m0s"},
		{"a lifetime", flagcheck.Lifetime("--cert-lifetime", 2*time.Hour, time.Hour, 24*time.Hour, "r"), ""},
		{"a count below", flagcheck.Int("--n", -1, 0, 10), "--n -1: must be from 0 to 10"},
		{"a count above", flagcheck.Int("--n", 11, 0, 10), "--n 11: must be from 0 to 10"},
		{"a rate of NaN", flagcheck.Rate("--r", math.NaN(), 1, 10), "--r NaN: must be from 1 to 10"},
		{"a negative QPS", flagcheck.KubeAPI(-1, 100), "--kube-api-qps -1: must be from 1 to 10000"},
		{"a zero burst", flagcheck.KubeAPI(50, 0), "--kube-api-burst 0: must be from 1 to 100000"},
		{"the defaults", flagcheck.KubeAPI(50, 100), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			switch {
			case tc.want == "" && tc.err != nil:
				t.Errorf("refused: %v", tc.err)
			case tc.want != "" && (tc.err == nil || !strings.Contains(tc.err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", tc.err, tc.want)
			}
		})
	}
}

// TestAllNamesEveryBadFlag: two bad flags are both named.
func TestAllNamesEveryBadFlag(t *testing.T) {
	err := flagcheck.All(flagcheck.AbsPath("--a", "x"), nil, flagcheck.DNSLabel("--b", "Y"))
	if err == nil || !strings.Contains(err.Error(), "--a") || !strings.Contains(err.Error(), "--b") {
		t.Errorf("got %v, want both --a and --b named", err)
	}
}
