// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package purenvml

import "testing"

// TestReturnNamesAreGoNVMLs: the hook's messages name codes as they did
// with go-nvml.
func TestReturnNamesAreGoNVMLs(t *testing.T) {
	for r, want := range map[Return]string{SUCCESS: "SUCCESS", ERROR_NOT_FOUND: "ERROR_NOT_FOUND",
		ERROR_ARGUMENT_VERSION_MISMATCH: "ERROR_ARGUMENT_VERSION_MISMATCH", ERROR_UNKNOWN: "ERROR_UNKNOWN", 77: "unknown return value: 77"} {
		if got := r.Error(); got != want {
			t.Errorf("Return(%d).Error() = %q, want %q", int32(r), got, want)
		}
	}
}
