// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"fmt"
	"regexp"
	"strings"
)

// CLIPlatforms are the platforms kubectl-gpufrac is released for (the
// Makefile's CLI_PLATFORMS), as GOOS/GOARCH.
var CLIPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// CLIArchive is the name of kubectl-gpufrac's archive for goos/goarch,
// which the krew manifest's uri names.
func CLIArchive(v, goos, goarch string) string {
	return fmt.Sprintf("kubectl-gpufrac_%s_%s_%s.tar.gz", v, goos, goarch)
}

// placeholder matches what deployments/krew/gpufrac.yaml leaves for the
// release to fill.
var placeholder = regexp.MustCompile(`RELEASE_VERSION|SHA256_[A-Z0-9]+_[A-Z0-9]+`)

// FillKrew fills the krew manifest template: RELEASE_VERSION with v and
// each SHA256_<OS>_<ARCH> with the checksum sums holds for that
// platform's CLIArchive. The template's leading comment (which explains
// the placeholders) gives way to one saying what the file is. A placeholder
// left unfilled, or a platform without a checksum, is an error: a released
// manifest with a placeholder cannot be installed.
func FillKrew(template []byte, v string, sums map[string]string) ([]byte, error) {
	lines := strings.Split(string(template), "\n")
	for len(lines) > 0 && strings.HasPrefix(lines[0], "#") {
		lines = lines[1:]
	}
	body := strings.Join(lines, "\n")
	var missing []string
	body = placeholder.ReplaceAllStringFunc(body, func(p string) string {
		if p == "RELEASE_VERSION" {
			return v
		}
		parts := strings.Split(strings.TrimPrefix(p, "SHA256_"), "_")
		archive := CLIArchive(v, strings.ToLower(parts[0]), strings.ToLower(parts[1]))
		sum, ok := sums[archive]
		if !ok {
			missing = append(missing, archive)
			return p
		}
		return sum
	})
	if len(missing) > 0 {
		return nil, fmt.Errorf("krew manifest: no checksum for %s", strings.Join(missing, ", "))
	}
	if left := placeholder.FindString(body); left != "" {
		return nil, fmt.Errorf("krew manifest: placeholder %s left unfilled", left)
	}
	header := fmt.Sprintf("# krew manifest of kubectl-gpufrac %s, made by `make release` from\n"+
		"# deployments/krew/gpufrac.yaml and the checksums in SHA256SUMS.\n"+
		"# Install before it is in the krew index: kubectl krew install --manifest=gpufrac.yaml\n", v)
	return []byte(header + body), nil
}
