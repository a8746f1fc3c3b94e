// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package docs

import (
	"regexp"
	"strings"
)

var (
	flagToken  = regexp.MustCompile(`(?:^|[\s(\x60\[])(--[a-z][a-z0-9-]*)`)
	flagRow    = regexp.MustCompile("^\\| (?:`-[a-zA-Z]`, )?`--([a-z0-9-]+)`")
	heading    = regexp.MustCompile(`^#{1,6} `)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	goFlagDecl = regexp.MustCompile(`\.(?:String|Bool|Int|Int64|Duration|Float64|Uint|Uint64)(?:Var)?(?:P)?\((?:&?[A-Za-z_.]+, )?"([a-z][a-z0-9-]*)"`)
)

// ReferenceFlags reads the flags of each binary from the generated sections
// of the reference page, which the binaries' own tests keep equal to their
// cobra commands (cmd/*/reference_test.go): section name → flag names.
func ReferenceFlags(reference string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	section := ""
	for _, l := range strings.Split(reference, "\n") {
		if name, ok := strings.CutPrefix(l, "<!-- BEGIN GENERATED "); ok {
			section = strings.TrimSuffix(name, " -->")
			out[section] = map[string]bool{"help": true}
			continue
		}
		if strings.HasPrefix(l, "<!-- END GENERATED") {
			section = ""
		}
		if m := flagRow.FindStringSubmatch(l); m != nil && section != "" {
			out[section][m[1]] = true
		}
	}
	return out
}

// GoFlags reads the flag names a Go source file defines with the flag or
// pflag package (for gpufrac-mps-launcher, which has no cobra command, and
// for build-tagged flags the reference leaves out).
func GoFlags(src string) []string {
	var out []string
	for _, m := range goFlagDecl.FindAllStringSubmatch(src, -1) {
		out = append(out, m[1])
	}
	return out
}

// UndefinedFlags returns the gpufrac flags a page names that the binary it
// names them for does not define. The attribution rule, so that kubelet's,
// helm's or nvidia-smi's flags are left alone:
//
//   - in a line of a code block, or in one code span, a --flag after the
//     name of a gpufrac binary on that line or span belongs to that binary;
//   - in prose, a code span that holds a --flag (`--flag`, `--flag=x`)
//     belongs to the gpufrac binaries the same line names outside code
//     spans or in them; where the line names none, to the binary named
//     by the nearest heading above, if that heading names one.
//
// A flag is defined when any attributed binary defines it (a line may name
// two). Generated sections are skipped.
func UndefinedFlags(page string, known map[string]map[string]bool) []Finding {
	lines := skipGenerated(strings.Split(page, "\n"))
	code := codeLines(lines)
	var out []Finding
	headingBins := []string(nil)
	for i, l := range lines {
		if !code[i] && heading.MatchString(l) {
			headingBins = namedBinaries(l)
			continue
		}
		for _, u := range flagUses(l, code[i], headingBins) {
			if !definedByAny(u.flag, u.bins, known) {
				out = append(out, Finding{Line: i + 1, Name: u.flag, Why: "not a flag of " + strings.Join(u.bins, " or ")})
			}
		}
	}
	return sortFindings(out)
}

type flagUse struct {
	flag string
	bins []string
}

// flagUses applies the attribution rule to one line.
func flagUses(l string, inCode bool, headingBins []string) []flagUse {
	var out []flagUse
	if inCode {
		return afterBinary(l)
	}
	lineBins := namedBinaries(l)
	if len(lineBins) == 0 {
		lineBins = headingBins
	}
	for _, span := range codeSpan.FindAllString(l, -1) {
		span = strings.Trim(span, "`")
		if binaryName.MatchString(span) {
			out = append(out, afterBinary(span)...)
			continue
		}
		if len(lineBins) == 0 || !strings.HasPrefix(span, "--") {
			continue
		}
		m := flagToken.FindStringSubmatch(span)
		if m == nil {
			continue // "--" alone, "---": no flag name
		}
		out = append(out, flagUse{flag: strings.TrimPrefix(m[1], "--"), bins: lineBins})
	}
	return out
}

// afterBinary attributes every --flag after a binary's name in s to it.
func afterBinary(s string) []flagUse {
	var out []flagUse
	locs := binaryName.FindAllStringIndex(s, -1)
	for k, loc := range locs {
		end := len(s)
		if k+1 < len(locs) {
			end = locs[k+1][0]
		}
		bin := Binaries[s[loc[0]:loc[1]]]
		for _, m := range flagToken.FindAllStringSubmatch(s[loc[1]:end], -1) {
			out = append(out, flagUse{flag: strings.TrimPrefix(m[1], "--"), bins: []string{bin}})
		}
	}
	return out
}

func namedBinaries(l string) []string {
	seen := map[string]bool{}
	var out []string
	for _, n := range binaryName.FindAllString(l, -1) {
		if b := Binaries[n]; !seen[b] {
			seen[b] = true
			out = append(out, b)
		}
	}
	return out
}

func definedByAny(flag string, bins []string, known map[string]map[string]bool) bool {
	for _, b := range bins {
		if known[b][flag] {
			return true
		}
	}
	return false
}
