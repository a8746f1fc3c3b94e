// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"strings"
	"testing"
)

func TestParseQuantityIsBounded(t *testing.T) {
	for s, want := range map[string]string{
		"141Gi": "", "40e9": "", "1e30": "", "1E-30": "", "8Ei": "", "1E": "", "9223372036854775807": "", "-1Gi": "",
		"1e31":                       "exponent 31 is outside [-30, 30]",
		"1E-999999999":               "exponent -999999999 is outside [-30, 30]",
		"1e999999999":                "exponent 999999999 is outside [-30, 30]",
		"1e99999999999999999999999":  "exponent 9223372036854775807 is outside",
		"1e-99999999999999999999999": "exponent -9223372036854775808 is outside",
		strings.Repeat("9", 65):      "longer than 64 characters",
		"abc":                        "quantities must match",
	} {
		_, err := ParseQuantity(s)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", s, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", s, err, want)
		}
	}
}

func TestFindUnboundedQuantity(t *testing.T) {
	for doc, want := range map[string]string{
		`{"spec":{"containers":[{"resources":{"requests":{"cpu":"1E-999999999"}}}]}}`:                       "1E-999999999",
		`{"spec":{"overhead":{"memory":2e999999999}}}`:                                                      "2e999999999",
		`{"exactly":{"capacity":{"requests":{"memory":"1e999999999"}}}}`:                                    "1e999999999",
		`{"emptyDir":{"sizeLimit":"1e-100"}}`:                                                               "1e-100",
		`{"limits":{"memory":"` + strings.Repeat("9", 65) + `"}}`:                                           strings.Repeat("9", 65),
		`{"requests":{"memory":"141Gi","cpu":1e30,"x":"1e-30"}}`:                                            "",
		`{"env":[{"name":"X","value":"1e999999999"}],"metadata":{"annotations":{"gpu-fraction":"1e-300"}}}`: "",
		`not json`: "",
		// Only what a decoder parses as a quantity is judged: not
		// annotations, labels, a node selector, or any driver's opaque
		// parameters (gpufrac's own are bounded by Decode).
		`{"metadata":{"annotations":{"sizeLimit":"1e999999999"},"labels":{"requests":"x"}}}`:                                                "",
		`{"spec":{"nodeSelector":{"sizeLimit":"1e999999999"}}}`:                                                                             "",
		`{"spec":{"devices":{"config":[{"opaque":{"driver":"nic","parameters":{"requests":{"bw":"1e999999999"},"sizeLimit":"1e-999"}}}]}}}`: "",
		`{"status":{"devices":[{"data":{"limits":{"x":"1e999999999"}}}]}}`:                                                                  "",
		`{"status":{"containerStatuses":[{"allocatedResources":{"cpu":"1e999999999"}}]}}`:                                                   "1e999999999",
		`{"status":{"allocation":{"devices":{"results":[{"consumedCapacity":{"memory":"1e999999999"}}]}}}}`:                                 "1e999999999",
	} {
		if got := FindUnboundedQuantity([]byte(doc)); got != want {
			t.Errorf("%s: %q, want %q", doc, got, want)
		}
	}
}
