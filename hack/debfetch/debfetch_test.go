// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package debfetch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

const (
	shaA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	shaB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func sha256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// tree writes files (relative path → content) under dir.
func tree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCached: a tree is reused only when its marker names exactly the
// pins' hashes, in order, and it holds every wanted path.
func TestCached(t *testing.T) {
	a := Pin{Package: "a", Version: "1", SHA256: shaA}
	b := Pin{Package: "b", Version: "1", SHA256: shaB}
	for _, tc := range []struct {
		name  string
		files map[string]string
		pins  []Pin
		want  []string
		ok    bool
	}{
		{"no tree", nil, []Pin{a}, nil, false},
		{"no marker", map[string]string{"usr/bin/a": "x"}, []Pin{a}, nil, false},
		{"marker of the pin", map[string]string{MarkerFile: shaA + "\n", "usr/bin/a": "x"}, []Pin{a}, []string{"usr/bin/a"}, true},
		{"upper-case pin", map[string]string{MarkerFile: shaA + "\n"}, []Pin{{Package: "a", Version: "1", SHA256: strings.ToUpper(shaA)}}, nil, true},
		{"marker of another build", map[string]string{MarkerFile: shaB + "\n"}, []Pin{a}, nil, false},
		{"wanted path missing", map[string]string{MarkerFile: shaA + "\n"}, []Pin{a}, []string{"usr/bin/a"}, false},
		{"two pins", map[string]string{MarkerFile: shaA + "\n" + shaB + "\n"}, []Pin{a, b}, nil, true},
		{"one of two pins", map[string]string{MarkerFile: shaA + "\n"}, []Pin{a, b}, nil, false},
		{"two pins in another order", map[string]string{MarkerFile: shaB + "\n" + shaA + "\n"}, []Pin{a, b}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "cache")
			if tc.files != nil {
				tree(t, dir, tc.files)
			}
			if got := Cached(dir, tc.pins, tc.want); got != tc.ok {
				t.Errorf("Cached = %v, want %v", got, tc.ok)
			}
		})
	}
}

// TestPinsChecked: an incomplete pin and one for another architecture are
// refused before anything is looked up or downloaded.
func TestPinsChecked(t *testing.T) {
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	for _, tc := range []struct {
		name    string
		pin     Pin
		is      error
		mention string
	}{
		{"no version", Pin{Package: "a", SHA256: shaA}, nil, "needs a package, a version"},
		{"short hash", Pin{Package: "a", Version: "1", SHA256: "abc"}, nil, "64-digit"},
		{"other architecture", Pin{Package: "a", Version: "1", Arch: other, SHA256: shaA}, ErrNoPin, "apt-cache show a=1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			err := fetch(context.Background(), filepath.Join(t.TempDir(), "x"), []Pin{tc.pin}, Options{},
				apt{tools: func() error { called = true; return nil }, download: nil})
			if err == nil || !strings.Contains(err.Error(), tc.mention) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("got %v, want an error saying %q (is %v)", err, tc.mention, tc.is)
			}
			if called {
				t.Error("the tools were looked up for a refused pin")
			}
		})
	}
}

// TestMissingToolsNamed: without apt-get or dpkg-deb, the error says which
// is missing and wraps ErrNoTool, and nothing is left behind.
func TestMissingToolsNamed(t *testing.T) {
	for _, tc := range []struct {
		name    string
		have    []string
		missing string
	}{
		{"neither", nil, "no apt-get and dpkg-deb on PATH"},
		{"no dpkg-deb", []string{"apt-get"}, "no dpkg-deb on PATH"},
		{"no apt-get", []string{"dpkg-deb"}, "no apt-get on PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := t.TempDir()
			for _, tool := range tc.have {
				if err := os.WriteFile(filepath.Join(bin, tool), []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			t.Setenv("PATH", bin)
			parent := t.TempDir()
			err := Fetch(context.Background(), filepath.Join(parent, "x"), []Pin{{Package: "p", Version: "1", SHA256: shaA}}, Options{})
			if !errors.Is(err, ErrNoTool) || !strings.Contains(err.Error(), tc.missing) || !strings.Contains(err.Error(), "p=1") {
				t.Errorf("got %v, want ErrNoTool naming p=1 and saying %q", err, tc.missing)
			}
			if entries, _ := os.ReadDir(parent); len(entries) != 0 {
				t.Errorf("a fetch that could not start left %d entries in %s", len(entries), parent)
			}
		})
	}
}

// served stands in for `apt-get download`: it writes the given files
// (name → content) and counts its calls.
type served struct {
	files map[string][]byte
	calls atomic.Int32
	delay time.Duration
}

func (s *served) apt() apt {
	return apt{tools: func() error { return nil }, download: func(_ context.Context, dir string, _ []Pin) error {
		s.calls.Add(1)
		time.Sleep(s.delay)
		for name, data := range s.files {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestChangedPackageRefused: a .deb whose hash is not its pin's is refused
// before anything is unpacked, the error names the package, the version
// and both hashes, and the destination is left as it was (absent, or an
// earlier tree) with no download directory beside it.
func TestChangedPackageRefused(t *testing.T) {
	deb := []byte("not the pinned build")
	got := sha256Hex(deb)
	good := Pin{Package: "good", Version: "2", SHA256: sha256Hex([]byte("good"))}
	for _, tc := range []struct {
		name     string
		earlier  map[string]string
		pins     []Pin
		files    map[string][]byte
		mentions []string
	}{
		{"fresh", nil, []Pin{{Package: "p", Version: "1:2.3-4", SHA256: shaA}},
			map[string][]byte{"p_1%3a2.3-4_all.deb": deb},
			[]string{"p=1:2.3-4", "p_1%3a2.3-4_all.deb", got, shaA}},
		{"over an earlier tree", map[string]string{MarkerFile: shaB + "\n", "old": "kept"}, []Pin{{Package: "p", Version: "1", SHA256: shaA}},
			map[string][]byte{"p_1_amd64.deb": deb},
			[]string{"p=1", got, shaA}},
		{"one of two changed", nil, []Pin{good, {Package: "p", Version: "1", SHA256: shaA}},
			map[string][]byte{"good_2_all.deb": []byte("good"), "p_1_all.deb": deb},
			[]string{"p=1", got, shaA}},
		{"missing from the download", nil, []Pin{{Package: "p", Version: "1", SHA256: shaA}},
			map[string][]byte{"other_1_all.deb": deb},
			[]string{"p=1", "left 0 .deb files"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "cache")
			if tc.earlier != nil {
				tree(t, dir, tc.earlier)
			}
			s := &served{files: tc.files}
			err := fetch(context.Background(), dir, tc.pins, Options{}, s.apt())
			if err == nil {
				t.Fatal("a changed package was accepted")
			}
			for _, m := range tc.mentions {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("the error does not say %q: %v", m, err)
				}
			}
			if tc.name != "missing from the download" && !errors.Is(err, ErrMismatch) {
				t.Errorf("the error does not wrap ErrMismatch: %v", err)
			}
			entries, _ := os.ReadDir(parent)
			var left []string
			for _, e := range entries {
				left = append(left, e.Name())
			}
			want := []string{"cache.lock"}
			if tc.earlier != nil {
				want = []string{"cache", "cache.lock"}
			}
			if !slices.Equal(left, want) {
				t.Errorf("%s holds %v after the refusal, want %v", parent, left, want)
			}
			if tc.earlier != nil {
				if data, err := os.ReadFile(filepath.Join(dir, "old")); err != nil || string(data) != "kept" {
					t.Errorf("the earlier tree was changed: %q %v", data, err)
				}
			}
		})
	}
}

// TestLockExcludesAndGivesUp: a held lock keeps another taker waiting (in
// the same process too) until it is released, and a wait ends with an
// error naming the lock when its timeout or context ends.
func TestLockExcludesAndGivesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := Lock(context.Background(), path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Lock(context.Background(), path, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("a second Lock while held: %v, want a timeout naming %s", err, path)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Lock(ctx, path, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("a Lock whose context ended: %v, want context.Canceled", err)
	}
	got := make(chan error, 1)
	go func() {
		unlock2, err := Lock(context.Background(), path, 10*time.Second)
		if err == nil {
			unlock2()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("Lock returned (%v) while the lock was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	if err := <-got; err != nil {
		t.Errorf("Lock after the release: %v", err)
	}
}

// debFile builds a .deb of files (relative path → content) with
// dpkg-deb --build, named as apt-get names it, and returns its name, its
// data and its pin.
func debFile(t *testing.T, pkg, version string, files map[string]string) (string, []byte, Pin) {
	t.Helper()
	dpkg, err := exec.LookPath("dpkg-deb")
	mustrun.Need(t, err == nil, "dpkg-deb, to build and unpack test packages")
	src := t.TempDir()
	tree(t, src, files)
	tree(t, src, map[string]string{"DEBIAN/control": "Package: " + pkg + "\nVersion: " + version +
		"\nArchitecture: all\nMaintainer: gpufrac tests <t@example.invalid>\nDescription: test package\n"})
	out := filepath.Join(t.TempDir(), "out.deb")
	if b, err := exec.Command(dpkg, "--root-owner-group", "-Zgzip", "--build", src, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v: %s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return pkg + "_" + version + "_all.deb", data, Pin{Package: pkg, Version: version, SHA256: sha256Hex(data)}
}

// TestFetchUnpacksOnceAndRefetchesOnAnewPin: two packages unpack into one
// tree with its marker; a second fetch of the same pins downloads nothing;
// a moved pin replaces the tree whole; a wanted path the packages lack is
// an error that leaves nothing behind.
func TestFetchUnpacksOnceAndRefetchesOnAnewPin(t *testing.T) {
	nameA, debA, pinA := debFile(t, "a", "1.0-1", map[string]string{"usr/bin/a": "a1", "usr/share/common": "from a"})
	nameB, debB, pinB := debFile(t, "b", "2.0-1", map[string]string{"usr/bin/b": "b2", "usr/share/common": "from b"})
	nameA2, debA2, pinA2 := debFile(t, "a", "1.1-1", map[string]string{"usr/bin/a": "a1.1"})
	parent := t.TempDir()
	dir := filepath.Join(parent, "cache")
	s := &served{files: map[string][]byte{nameA: debA, nameB: debB}}
	var steps []string
	opts := Options{Want: []string{"usr/bin/a"}, Step: func(what string) func(error) {
		steps = append(steps, what)
		return func(error) {}
	}}
	for range 2 {
		if err := fetch(context.Background(), dir, []Pin{pinA, pinB}, opts, s.apt()); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.calls.Load(); n != 1 || len(steps) != 1 || !strings.Contains(steps[0], "a=1.0-1 b=2.0-1") {
		t.Errorf("two fetches of the same pins downloaded %d times with steps %q, want once, naming both", n, steps)
	}
	for name, want := range map[string]string{"usr/bin/a": "a1", "usr/bin/b": "b2", "usr/share/common": "from b",
		MarkerFile: pinA.SHA256 + "\n" + pinB.SHA256 + "\n"} {
		if data, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(data) != want {
			t.Errorf("%s = %q (%v), want %q", name, data, err, want)
		}
	}

	s.files = map[string][]byte{nameA2: debA2}
	if err := fetch(context.Background(), dir, []Pin{pinA2}, opts, s.apt()); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "usr/bin/a")); string(data) != "a1.1" || s.calls.Load() != 2 {
		t.Errorf("after moving the pin usr/bin/a = %q after %d downloads, want a1.1 after 2", data, s.calls.Load())
	}
	if _, err := os.Stat(filepath.Join(dir, "usr/bin/b")); err == nil {
		t.Error("the new tree kept a file of the earlier one")
	}

	other := filepath.Join(parent, "other")
	err := fetch(context.Background(), other, []Pin{pinA2}, Options{Want: []string{"usr/bin/missing"}}, s.apt())
	if err == nil || !strings.Contains(err.Error(), "usr/bin/missing") || !strings.Contains(err.Error(), "a=1.1-1") {
		t.Errorf("a fetch without a wanted path: %v, want an error naming it and the package", err)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("a fetch without a wanted path left a tree")
	}
}

// TestConcurrentFetchesShareOne: fetches of one tree at once (test
// processes, here goroutines with their own lock files' descriptors)
// download once; the others wait and reuse it.
func TestConcurrentFetchesShareOne(t *testing.T) {
	name, deb, pin := debFile(t, "c", "1", map[string]string{"usr/bin/c": "c"})
	dir := filepath.Join(t.TempDir(), "cache")
	s := &served{files: map[string][]byte{name: deb}, delay: 200 * time.Millisecond}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = fetch(context.Background(), dir, []Pin{pin}, Options{}, s.apt()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if n := s.calls.Load(); n != 1 {
		t.Errorf("%d concurrent fetches downloaded %d times, want once", len(errs), n)
	}
}
