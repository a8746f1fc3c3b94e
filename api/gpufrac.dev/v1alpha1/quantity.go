package v1alpha1

import (
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

// ParseQuantity is resource.ParseQuantity for text from users, bounded
// first. resource.ParseQuantity("1E-999999999") rounds its result to nano
// precision through a number with a billion digits, and a parsed
// "1e999999999" does the same in Cmp: minutes of CPU for one annotation or
// one field of a manifest. The text is refused before that can happen.
func ParseQuantity(s string) (resource.Quantity, error) {
	if len(s) > MaxQuantityLength {
		return resource.Quantity{}, fmt.Errorf("longer than %d characters", MaxQuantityLength)
	}
	if e, ok := decimalExponent(s); ok && (e > MaxQuantityExponent || e < -MaxQuantityExponent) {
		return resource.Quantity{}, fmt.Errorf("exponent %d is outside [-%d, %d]", e, MaxQuantityExponent, MaxQuantityExponent)
	}
	return resource.ParseQuantity(s)
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
