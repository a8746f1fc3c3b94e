// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"strconv"
	"strings"
)

// deviceOrder sorts gpu-2 before gpu-10.
func deviceOrder(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "gpu-"))
	if err != nil {
		return -1
	}
	return n
}
