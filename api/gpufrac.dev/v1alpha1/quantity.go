// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// FindUnboundedQuantity returns the first quantity in a JSON document that
// ParseQuantity would refuse, "" when there is none, so that a caller can
// refuse the document before decoding it into typed objects: a decoder
// hands every resource.Quantity field to resource.ParseQuantity. Quantities
// are the values of the maps under "requests", "limits" and "overhead" (a
// container's and a pod's resources, a claim's capacity requests) and of
// "sizeLimit" (emptyDir); other strings, say an environment variable of
// "1e100", are not quantities and pass.
func FindUnboundedQuantity(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if dec.Decode(&doc) != nil {
		return "" // not JSON: the caller's decoder says so
	}
	return findQuantity(doc, false)
}

var quantityMaps = map[string]bool{"requests": true, "limits": true, "overhead": true}

func findQuantity(v any, isQuantity bool) string {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if isQuantity && unbounded(x) {
				return fmt.Sprint(x)
			}
			if k == "sizeLimit" && unbounded(x) {
				return fmt.Sprint(x)
			}
			if found := findQuantity(x, quantityMaps[k]); found != "" {
				return found
			}
		}
	case []any:
		for _, x := range v {
			if found := findQuantity(x, false); found != "" {
				return found
			}
		}
	}
	return ""
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
