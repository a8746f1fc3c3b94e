// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// semver is SemVer 2.0's grammar, which Helm requires of a chart's version.
var semver = regexp.MustCompile(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$`)

// CheckVersion refuses a version that Helm, krew or an image tag would not
// take: SemVer 2.0 without a leading "v" (image tags allow no "+", so no
// build metadata either).
func CheckVersion(v string) error {
	if !semver.MatchString(v) || strings.Contains(v, "+") {
		return fmt.Errorf("version %q: want SemVer 2.0 without a leading v or build metadata, e.g. 1.2.3 or 1.2.3-rc.1", v)
	}
	return nil
}

// PackageChart packages the chart directory dir as `helm package
// --version v --app-version v` does: a gzip'd tar of the chart's files
// under <name>/, less those its .helmignore names, with Chart.yaml's
// version and appVersion set to v. It returns the package's file name
// (<name>-<v>.tgz) and contents, reproducible (see tarGz).
func PackageChart(dir, v string, mtime time.Time) (string, []byte, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return "", nil, err
	}
	name, chartYAML, err := setChartVersion(raw, v)
	if err != nil {
		return "", nil, fmt.Errorf("%s/Chart.yaml: %w", dir, err)
	}
	ignore, err := readHelmignore(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return "", nil, err
	}
	var entries []entry
	err = filepath.WalkDir(dir, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, file)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignore.match(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: the chart holds only regular files", file)
		}
		data := chartYAML
		if rel != "Chart.yaml" {
			if data, err = os.ReadFile(file); err != nil {
				return err
			}
		}
		entries = append(entries, entry{Name: name + "/" + rel, Mode: 0o644, Data: data})
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	data, err := tarGz(entries, mtime)
	return name + "-" + v + ".tgz", data, err
}

// setChartVersion rewrites Chart.yaml's top-level version and appVersion
// lines, keeping every other line (comments included) as written, and
// returns the chart's name.
func setChartVersion(raw []byte, v string) (string, []byte, error) {
	var out bytes.Buffer
	var name string
	var setVersion, setApp bool
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		key, value, _ := strings.Cut(line, ":")
		switch key {
		case "name":
			name = strings.Trim(strings.TrimSpace(value), `"'`)
		case "version":
			line, setVersion = "version: "+v, true
		case "appVersion":
			line, setApp = "appVersion: "+strconv.Quote(v), true
		}
		out.WriteString(line + "\n")
	}
	switch {
	case name == "":
		return "", nil, fmt.Errorf("no top-level name")
	case !setVersion || !setApp:
		return "", nil, fmt.Errorf("no top-level version or appVersion line to set to %s", v)
	}
	return name, out.Bytes(), nil
}

// helmignore holds .helmignore's patterns: shell globs matched against a
// path relative to the chart and against its base name, a trailing "/"
// matching directories only (the subset of Helm's rules this chart's file
// uses; TestReleaseArtifacts compares the package with what Helm's loader
// reads from the directory).
type helmignore []string

func readHelmignore(file string) (helmignore, error) {
	raw, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out helmignore
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "!") {
			return nil, fmt.Errorf("%s: negated pattern %q is not supported by the release packager", file, line)
		}
		out = append(out, line)
	}
	return out, nil
}

func (h helmignore) match(rel string, dir bool) bool {
	for _, p := range h {
		dirOnly := strings.HasSuffix(p, "/")
		p = strings.TrimSuffix(p, "/")
		if dirOnly && !dir {
			continue
		}
		if ok, _ := path.Match(p, rel); ok {
			return true
		}
		if ok, _ := path.Match(p, path.Base(rel)); ok {
			return true
		}
	}
	return false
}
