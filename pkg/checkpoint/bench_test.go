package checkpoint_test

import (
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkDurableWriteFloor is one atomic, durable write of a small file
// (temp file, fsync, rename, fsync of the directory): the least a Prepare
// must pay per record it keeps. Compare BenchmarkPrepareUnprepare with it
// in the same run.
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
