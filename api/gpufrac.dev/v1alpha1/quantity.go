// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Bounds on the text of a quantity read from a user (ParseQuantity).
const (
	// MaxQuantityLength: "9223372036854775807" is 19 characters and
	// "184320Mi" 8; 64 leaves room for any honest spelling.
	MaxQuantityLength = 64
	// MaxQuantityExponent bounds a decimal exponent ("1e30"): GPU memory
	// needs at most e19 (int64 bytes) and quantities carry at most nine
	// decimal places (nano).
	MaxQuantityExponent = 30
)

// UnboundedQuantityError is ParseQuantity's refusal of a text it does not
// parse at all.
type UnboundedQuantityError struct{ Reason string }

func (e *UnboundedQuantityError) Error() string { return e.Reason }

// ParseQuantity is resource.ParseQuantity for text from users, bounded
// first. resource.ParseQuantity("1E-999999999") rounds its result to nano
// precision through a number with a billion digits, and a parsed
// "1e999999999" does the same in Cmp: minutes of CPU for one annotation or
// one field of a manifest. The text is refused before that can happen.
func ParseQuantity(s string) (resource.Quantity, error) {
	if _, err := boundedText(s); err != nil {
		return resource.Quantity{}, err
	}
	return resource.ParseQuantity(s)
}

// boundedText refuses the text of a quantity that is too long or has too
// large an exponent to parse.
func boundedText(s string) (string, error) {
	if len(s) > MaxQuantityLength {
		return "", &UnboundedQuantityError{fmt.Sprintf("longer than %d characters", MaxQuantityLength)}
	}
	if e, ok := decimalExponent(s); ok && (e > MaxQuantityExponent || e < -MaxQuantityExponent) {
		return "", &UnboundedQuantityError{fmt.Sprintf("exponent %d is outside [-%d, %d]", e, MaxQuantityExponent, MaxQuantityExponent)}
	}
	return s, nil
}

// decimalExponent is the exponent of "<number>e<exponent>" (or E); ok is
// false when s has none (the suffixes E, Ei are not exponents). An exponent
// too long for an int64 reports the largest one.
func decimalExponent(s string) (int64, bool) {
	i := strings.IndexAny(s, "eE")
	if i < 1 || i == len(s)-1 {
		return 0, false
	}
	exp := s[i+1:]
	digits := strings.TrimLeft(exp, "+-")
	if len(exp)-len(digits) > 1 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return 0, false
	}
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		if strings.HasPrefix(exp, "-") {
			return -1 << 63, true
		}
		return 1<<63 - 1, true
	}
	return e, true
}

// UnboundedQuantity is a quantity in a document that ParseQuantity would
// refuse: where it is (a field path) and its text.
type UnboundedQuantity struct{ Path, Value string }

// FindUnboundedQuantity returns the text of the first quantity in a JSON
// document that ParseQuantity would refuse, "" when there is none
// (FindUnboundedQuantityAt says where).
func FindUnboundedQuantity(data []byte) string {
	if q := FindUnboundedQuantityAt(data); q != nil {
		return q.Value
	}
	return ""
}

// FindUnboundedQuantityAt returns the first quantity in a JSON object that
// ParseQuantity would refuse, nil when there is none, so that a caller can
// refuse the object before decoding it into typed objects: a decoder hands
// every resource.Quantity field to resource.ParseQuantity. Quantities are
// the values of the maps under "requests", "limits", "overhead",
// "allocatedResources" and "consumedCapacity" (a container's and a pod's
// resources, a claim's capacity requests and what was allocated) and of
// "sizeLimit" (emptyDir). What a typed decoder keeps as text or raw JSON is
// not judged: metadata (annotations, labels), a node selector, and any
// driver's opaque parameters or device data, which are another driver's to
// read (gpufrac's own parameters are bounded by Decode). Other strings, say
// an environment variable of "1e100", are not quantities either.
func FindUnboundedQuantityAt(data []byte) *UnboundedQuantity {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return nil // not JSON: the caller's decoder says so
	}
	return findQuantity(doc, "", false)
}

var (
	quantityMaps = map[string]bool{"requests": true, "limits": true, "overhead": true, "allocatedResources": true, "consumedCapacity": true}
	// notDecoded are the fields whose keys are the user's or another
	// driver's, which a typed decoder keeps as strings or raw JSON.
	notDecoded = map[string]bool{"metadata": true, "nodeSelector": true, "parameters": true, "data": true}
)

func findQuantity(v any, path string, isQuantity bool) *UnboundedQuantity {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			x := v[k]
			if isQuantity {
				if unbounded(x) {
					return &UnboundedQuantity{Path: path + "[" + k + "]", Value: fmt.Sprint(x)}
				}
				continue
			}
			child := k
			if path != "" {
				child = path + "." + k
			}
			if k == "sizeLimit" && unbounded(x) {
				return &UnboundedQuantity{Path: child, Value: fmt.Sprint(x)}
			}
			if notDecoded[k] {
				continue
			}
			if found := findQuantity(x, child, quantityMaps[k]); found != nil {
				return found
			}
		}
	case []any:
		for i, x := range v {
			if found := findQuantity(x, fmt.Sprintf("%s[%d]", path, i), false); found != nil {
				return found
			}
		}
	}
	return nil
}

func unbounded(v any) bool {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case json.Number:
		s = v.String()
	default:
		return false
	}
	var refused *UnboundedQuantityError
	_, err := boundedText(s)
	return errors.As(err, &refused)
}
