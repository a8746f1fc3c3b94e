// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
)

// FuzzDecode: a checkpoint that decodes re-encodes to the same bytes, so
// nothing in it (quarantined entries and unknown fields included) is
// silently dropped or altered by a restart.
func FuzzDecode(f *testing.F) {
	good, _ := checkpoint.Encode("boot", map[types.UID]checkpoint.Entry{
		"a": entry("a", checkpoint.Completed), "b": entry("b", checkpoint.Started)})
	empty, _ := checkpoint.Encode("boot", map[types.UID]checkpoint.Entry{})
	for _, seed := range [][]byte{good, empty, []byte(`{}`), []byte(`{"version":1}`), good[:len(good)/3]} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := checkpoint.Decode(raw)
		if err != nil {
			return
		}
		again, err := d.Encode()
		if err != nil {
			t.Fatalf("re-encoding a decoded checkpoint: %v", err)
		}
		// The file's own bytes may differ in whitespace or key order; what
		// must hold is that decoding the re-encoding gives the same data,
		// and that re-encoding is a fixed point.
		d2, err := checkpoint.Decode(again)
		if err != nil {
			t.Fatalf("re-encoded checkpoint does not decode: %v", err)
		}
		if len(d2.Claims) != len(d.Claims) || len(d2.Quarantined) != len(d.Quarantined) {
			t.Fatalf("re-encoding changed the entries: %d understood and %d quarantined, then %d and %d",
				len(d.Claims), len(d.Quarantined), len(d2.Claims), len(d2.Quarantined))
		}
		third, _ := d2.Encode()
		if !bytes.Equal(again, third) {
			t.Fatalf("encoding is not stable:\n%s\n%s", again, third)
		}
		if isCanonical(raw, again) && !bytes.Equal(raw, again) {
			t.Fatalf("a canonical checkpoint re-encodes differently")
		}
	})
}

// isCanonical: the input was written by Encode (same length and prefix),
// where byte equality must hold.
func isCanonical(raw, encoded []byte) bool {
	return len(raw) == len(encoded) && bytes.HasPrefix(raw, []byte(`{"version":1,"checksum":"sha256:`))
}
