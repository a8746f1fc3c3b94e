// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package status

import (
	"strconv"
	"strings"
)

// deviceOrder sorts gpu-2 before gpu-10.
func deviceOrder(name string) int {
	// A MIG instance (gpu-<parent>-mig-<gi>-<ci>) sorts by its parent.
	head, _, _ := strings.Cut(strings.TrimPrefix(name, "gpu-"), "-")
	n, err := strconv.Atoi(head)
	if err != nil {
		return -1
	}
	return n
}
