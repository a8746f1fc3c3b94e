// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
)

// BenchmarkDurableWriteFloor is one atomic, durable write of a small file
// (temp file, fsync, rename, fsync of the directory): the least a driver
// pays per claim if it keeps one durable record per claim, as the
// reference driver does. gpufrac's records are atomic, not durable
// (docs/reliability.md); BenchmarkPrepareOverGRPC compares with this floor
// in its own process.
func BenchmarkDurableWriteFloor(b *testing.B) {
	dir := b.TempDir()
	path := filepath.Join(dir, "f.json")
	data := make([]byte, 1024)
	for b.Loop() {
		tmp, err := os.CreateTemp(dir, "f.tmp-*")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tmp.Write(data); err != nil {
			b.Fatal(err)
		}
		if err := tmp.Sync(); err != nil {
			b.Fatal(err)
		}
		_ = tmp.Close()
		if err := os.Rename(tmp.Name(), path); err != nil {
			b.Fatal(err)
		}
		d, err := os.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			b.Fatal(err)
		}
		_ = d.Close()
	}
}

// BenchmarkEncode500 compares, in one run, what a commit costs with 500
// prepared claims: encoding every entry again (the whole-map encoding of
// the releases before api/v1, "reencode") against concatenating entries
// encoded once when they changed ("concat", what Checkpoint.commit does).
func BenchmarkEncode500(b *testing.B) {
	claims := map[types.UID]checkpoint.Entry{}
	for i := range 500 {
		uid := fmt.Sprintf("uid-%04d", i)
		claims[types.UID(uid)] = entry(uid, checkpoint.Completed)
	}
	raw, err := checkpoint.Encode("boot", claims)
	if err != nil {
		b.Fatal(err)
	}
	d, err := checkpoint.Decode(raw)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("reencode", func(b *testing.B) {
		for b.Loop() {
			if _, err := checkpoint.Encode("boot", claims); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concat", func(b *testing.B) {
		for b.Loop() {
			if _, err := d.Encode(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
