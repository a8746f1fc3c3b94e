// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var testEpoch = time.Unix(1764633600, 0)

// readTarGz returns an archive's headers and contents, checking its gzip
// header carries nothing of the machine.
func readTarGz(t *testing.T, data []byte) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() || gz.OS != 255 {
		t.Errorf("gzip header name %q mtime %v OS %d: want empty, zero, 255 (unknown)", gz.Name, gz.ModTime, gz.OS)
	}
	tr := tar.NewReader(gz)
	var hdrs []*tar.Header
	files := map[string][]byte{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, hdr)
		files[hdr.Name] = body
	}
	return hdrs, files
}

func TestTarGzIsPinned(t *testing.T) {
	in := []entry{{Name: "b", Mode: 0o755, Data: []byte("bee")}, {Name: "a", Mode: 0o644, Data: []byte("ay")}}
	one, err := tarGz(in, testEpoch.Add(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reversed := []entry{in[1], in[0]}
	two, err := tarGz(reversed, testEpoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(one, two) {
		t.Error("the same files in another order (and a sub-second mtime) give another archive")
	}
	hdrs, files := readTarGz(t, one)
	if len(hdrs) != 2 || hdrs[0].Name != "a" || hdrs[1].Name != "b" {
		t.Fatalf("entries %v: want a, b in order", hdrs)
	}
	for _, h := range hdrs {
		if !h.ModTime.Equal(testEpoch) || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s: mtime %v owner %d:%d (%q:%q), want %v 0:0 without names", h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname, testEpoch)
		}
	}
	if hdrs[1].Mode != 0o755 || string(files["b"]) != "bee" {
		t.Errorf("b: mode %o contents %q", hdrs[1].Mode, files["b"])
	}
}

func TestSumsRoundTrip(t *testing.T) {
	sums := map[string]string{"z.tgz": strings.Repeat("ab", 32), "a.tar.gz": strings.Repeat("01", 32)}
	file := SumsFile(sums)
	want := strings.Repeat("01", 32) + "  a.tar.gz\n" + strings.Repeat("ab", 32) + "  z.tgz\n"
	if string(file) != want {
		t.Errorf("SumsFile = %q, want %q (sha256sum's format, sorted)", file, want)
	}
	back, err := ParseSums(append(file, []byte(strings.Repeat("CD", 32)+" *bin/c\n")...))
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 3 || back["a.tar.gz"] != sums["a.tar.gz"] || back["c"] != strings.Repeat("cd", 32) {
		t.Errorf("ParseSums = %v", back)
	}
	if _, err := ParseSums([]byte("nothex  x\n")); err == nil {
		t.Error("ParseSums took a line without a checksum")
	}
}

func TestCheckVersion(t *testing.T) {
	for _, ok := range []string{"0.0.0-test", "1.2.3", "1.2.3-rc.1"} {
		if err := CheckVersion(ok); err != nil {
			t.Errorf("CheckVersion(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "v1.2.3", "1.2", "01.2.3", "1.2.3+meta", "1.2.3 "} {
		if err := CheckVersion(bad); err == nil {
			t.Errorf("CheckVersion(%q) accepted it", bad)
		}
	}
}

func TestFillKrew(t *testing.T) {
	template, err := os.ReadFile(filepath.Join("..", "..", "deployments", "krew", "gpufrac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]string{}
	for i, p := range CLIPlatforms {
		goos, goarch, _ := strings.Cut(p, "/")
		sums[CLIArchive("1.2.3", goos, goarch)] = strings.Repeat(string(rune('a'+i)), 64)
	}
	out, err := FillKrew(template, "1.2.3", sums)
	if err != nil {
		t.Fatal(err)
	}
	if placeholder.Match(out) {
		t.Errorf("a placeholder is left:\n%s", out)
	}
	for archive, sum := range sums {
		if !bytes.Contains(out, []byte("/1.2.3/"+archive+"\n    sha256: "+sum+"\n")) {
			t.Errorf("the manifest does not pair %s with its checksum %s:\n%s", archive, sum, out)
		}
	}
	delete(sums, CLIArchive("1.2.3", "darwin", "arm64"))
	if _, err := FillKrew(template, "1.2.3", sums); err == nil || !strings.Contains(err.Error(), "darwin_arm64") {
		t.Errorf("FillKrew without darwin/arm64's checksum: %v, want an error naming it", err)
	}
}

func TestPackageChart(t *testing.T) {
	dir := t.TempDir()
	chart := "# a comment\napiVersion: v2\nname: demo\nversion: 0.1.0\nappVersion: \"0.1.0\"\n"
	files := map[string]string{"Chart.yaml": chart, "values.yaml": "a: 1\n", "templates/x.yaml": "kind: X\n",
		"templates/x.yaml.bak": "old", ".helmignore": "*.bak\nskip/\n", "skip/y.yaml": "no"}
	for name, data := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	name, data, err := PackageChart(dir, "2.0.0-rc.1", testEpoch)
	if err != nil {
		t.Fatal(err)
	}
	if name != "demo-2.0.0-rc.1.tgz" {
		t.Errorf("package name %q", name)
	}
	hdrs, got := readTarGz(t, data)
	var names []string
	for _, h := range hdrs {
		names = append(names, h.Name)
		if h.Mode != 0o644 {
			t.Errorf("%s: mode %o, want 0644 whatever the file's", h.Name, h.Mode)
		}
	}
	if want := "demo/.helmignore demo/Chart.yaml demo/templates/x.yaml demo/values.yaml"; strings.Join(names, " ") != want {
		t.Errorf("package holds %v, want %s", names, want)
	}
	if want := "# a comment\napiVersion: v2\nname: demo\nversion: 2.0.0-rc.1\nappVersion: \"2.0.0-rc.1\"\n"; string(got["demo/Chart.yaml"]) != want {
		t.Errorf("Chart.yaml = %q, want %q", got["demo/Chart.yaml"], want)
	}
}

func TestMergeSBOMs(t *testing.T) {
	doc := func(extra string) map[string]any {
		return map[string]any{
			"specVersion": "1.6",
			"metadata":    map[string]any{"component": map[string]any{"bom-ref": "pkg:golang/main@v1", "name": "main"}},
			"components":  []any{map[string]any{"bom-ref": "pkg:golang/shared@v1"}, map[string]any{"bom-ref": extra}},
			"dependencies": []any{
				map[string]any{"ref": "pkg:golang/main@v1", "dependsOn": []any{"pkg:golang/shared@v1", extra}},
			},
		}
	}
	merged, err := mergeSBOMs([]map[string]any{doc("pkg:golang/a@v1"), doc("pkg:golang/b@v1")},
		"ghcr.io/x/y:1.0.0", "1.0.0", "amd64", []string{"/bin/a", "/bin/b"}, testEpoch)
	if err != nil {
		t.Fatal(err)
	}
	comps := merged["components"].([]any)
	if len(comps) != 4 {
		t.Errorf("components %v: want main, shared, a and b once each", comps)
	}
	var mainDeps []string
	for _, d := range merged["dependencies"].([]any) {
		if dep := d.(map[string]any); dep["ref"] == "pkg:golang/main@v1" {
			mainDeps = dep["dependsOn"].([]string)
		}
	}
	if strings.Join(mainDeps, " ") != "pkg:golang/a@v1 pkg:golang/b@v1 pkg:golang/shared@v1" {
		t.Errorf("main depends on %v, want the union", mainDeps)
	}
	meta := merged["metadata"].(map[string]any)
	if meta["timestamp"] != "2025-12-02T00:00:00Z" {
		t.Errorf("timestamp %v, want the epoch's", meta["timestamp"])
	}
	if c := meta["component"].(map[string]any); c["type"] != "container" || c["name"] != "ghcr.io/x/y:1.0.0" {
		t.Errorf("subject %v, want the image", c)
	}
}

func TestEmptyableRefusesAForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := emptyable(dir); err != nil {
		t.Errorf("an empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := emptyable(dir); err == nil {
		t.Error("a directory with someone's files and no SHA256SUMS would be emptied")
	}
	if err := os.WriteFile(filepath.Join(dir, Checksums), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := emptyable(dir); err != nil {
		t.Errorf("an earlier release's directory: %v", err)
	}
}
