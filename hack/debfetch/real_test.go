// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package debfetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// small is a real Debian bookworm package of 34 KB, "Architecture: all"
// (the same .deb on every machine), with its hash from `apt-cache show
// libgcc-s1-arm64-cross=12.2.0-14cross1`. hack/release pins it too, among
// the cross compiler's packages.
var small = Pin{Package: "libgcc-s1-arm64-cross", Version: "12.2.0-14cross1",
	SHA256: "af1e686fc6a416228222e7bfb68317dd2fa2685236301ae29141fc6108a66cac"}

const smallFile = "usr/aarch64-linux-gnu/lib/libgcc_s.so.1"

// TestRealFetch fetches a small pinned package from this machine's apt
// sources into a temporary directory, reuses it without a download, and
// refuses the same package under a wrong hash. Where it cannot be fetched
// (no apt-get, no mirror) it skips, and fails under GPUFRAC_E2E=required;
// a changed package always fails.
func TestRealFetch(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads from the apt mirror")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "small")
	steps := 0
	opts := Options{Want: []string{smallFile}, Step: func(string) func(error) { steps++; return func(error) {} }}
	err := Fetch(ctx, dir, []Pin{small}, opts)
	mustrun.Need(t, !errors.Is(err, ErrNoTool) && !errors.Is(err, ErrDownload), "fetching a Debian package: "+errString(err))
	if err != nil {
		t.Fatal(err)
	}
	marker, err := os.ReadFile(filepath.Join(dir, MarkerFile))
	if err != nil || strings.TrimSpace(string(marker)) != small.SHA256 {
		t.Errorf("marker %q (%v), want the pin's hash", marker, err)
	}
	if err := Fetch(ctx, dir, []Pin{small}, opts); err != nil || steps != 1 {
		t.Errorf("fetching again: %v after %d downloads, want the cached tree after 1", err, steps)
	}

	wrong := small
	wrong.SHA256 = strings.Repeat("0", 64)
	other := filepath.Join(t.TempDir(), "wrong")
	err = Fetch(ctx, other, []Pin{wrong}, opts)
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), small.SHA256) || !strings.Contains(err.Error(), wrong.SHA256) {
		t.Errorf("fetching under a wrong hash: %v, want ErrMismatch naming both hashes", err)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("a refused package was unpacked")
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}
