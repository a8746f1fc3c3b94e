// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// The layout of glibc's linker cache, format "glibc-ld.so.cache1.1"
// (glibc sysdeps/generic/dl-cache.h, struct cache_file_new and
// file_entry_new): a 48-byte header (magic, version, nlibs, len_strings,
// flags, padding, extension_offset, unused), nlibs 24-byte entries (flags
// int32, key and value uint32 string offsets, osversion uint32, hwcap
// uint64), then the strings. Offsets count from the header. A cache in
// the old format ("ld.so-1.7.0", 12-byte entries after a 16-byte header)
// may precede it, 8-byte aligned; glibc 2.32 and later write the new one
// alone.
const (
	newMagic       = "glibc-ld.so.cache"
	newVersion     = "1.1"
	oldMagic       = "ld.so-1.7.0"
	newHeaderBytes = 48
	newEntryBytes  = 24
	oldHeaderBytes = 16
	oldEntryBytes  = 12
)

// cacheEntry is one library of the cache: its name (the SONAME the linker
// looks up) and the path it resolves to.
type cacheEntry struct{ Name, Path string }

// parseLDCache reads the entries of an ld.so.cache.
func parseLDCache(data []byte) ([]cacheEntry, error) {
	start := 0
	if bytes.HasPrefix(data, []byte(oldMagic)) {
		if len(data) < oldHeaderBytes {
			return nil, errors.New("old-format header cut short")
		}
		n := int(binary.LittleEndian.Uint32(data[12:16]))
		start = (oldHeaderBytes + n*oldEntryBytes + 7) &^ 7
	}
	if len(data) < start+newHeaderBytes || string(data[start:start+len(newMagic)]) != newMagic {
		return nil, fmt.Errorf("no %q header", newMagic+newVersion)
	}
	hdr := data[start:]
	if v := string(hdr[len(newMagic) : len(newMagic)+3]); v != newVersion {
		return nil, fmt.Errorf("cache version %q, want %s", v, newVersion)
	}
	n := int(binary.LittleEndian.Uint32(hdr[20:24]))
	if n < 0 || newHeaderBytes+n*newEntryBytes > len(hdr) {
		return nil, fmt.Errorf("%d entries do not fit in %d bytes", n, len(hdr))
	}
	out := make([]cacheEntry, 0, n)
	for i := range n {
		e := hdr[newHeaderBytes+i*newEntryBytes:]
		name, err := cString(hdr, binary.LittleEndian.Uint32(e[4:8]))
		if err != nil {
			return nil, fmt.Errorf("entry %d key: %w", i, err)
		}
		path, err := cString(hdr, binary.LittleEndian.Uint32(e[8:12]))
		if err != nil {
			return nil, fmt.Errorf("entry %d value: %w", i, err)
		}
		out = append(out, cacheEntry{Name: name, Path: path})
	}
	return out, nil
}

func cString(data []byte, off uint32) (string, error) {
	if int(off) >= len(data) {
		return "", fmt.Errorf("string offset %d past the end (%d bytes)", off, len(data))
	}
	end := bytes.IndexByte(data[off:], 0)
	if end < 0 {
		return "", fmt.Errorf("string at %d not terminated", off)
	}
	return string(data[off : int(off)+end]), nil
}

// driverLibraries are what a CUDA program loads from the driver.
var driverLibraries = []string{"libcuda.so.1", "libnvidia-ml.so.1"}

// driverBinaries are the driver programs the probe looks for on PATH.
var driverBinaries = []string{"nvidia-smi"}

// printDriver prints the container's linker cache (LDCACHE name path),
// how each driver library resolves through it (DRIVERLIB name
// cache-path real-path soname, or DRIVERLIB name missing reason) and the
// driver's binaries (BIN name path).
func printDriver() {
	raw, err := os.ReadFile("/etc/ld.so.cache")
	var entries []cacheEntry
	if err == nil {
		entries, err = parseLDCache(raw)
	}
	if err != nil {
		fmt.Println("LDCACHEERR", err)
	}
	for _, e := range entries {
		fmt.Println("LDCACHE", e.Name, e.Path)
	}
	for _, name := range driverLibraries {
		fmt.Println("DRIVERLIB", name, resolveLibrary(entries, name))
	}
	for _, name := range driverBinaries {
		for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
			p := filepath.Join(dir, name)
			if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
				fmt.Println("BIN", name, p)
				break
			}
		}
	}
}

// resolveLibrary finds name in the cache as the dynamic linker would (the
// first entry of that name), follows its links and reads the ELF SONAME.
func resolveLibrary(entries []cacheEntry, name string) string {
	for _, e := range entries {
		if e.Name != name {
			continue
		}
		resolved, err := filepath.EvalSymlinks(e.Path)
		if err != nil {
			return "missing " + err.Error()
		}
		f, err := elf.Open(resolved)
		if err != nil {
			return "missing " + err.Error()
		}
		defer func() { _ = f.Close() }()
		soname, err := f.DynString(elf.DT_SONAME)
		if err != nil || len(soname) != 1 {
			return fmt.Sprintf("missing %s has no SONAME (%v)", resolved, err)
		}
		return e.Path + " " + resolved + " " + soname[0]
	}
	return "missing not in /etc/ld.so.cache"
}
