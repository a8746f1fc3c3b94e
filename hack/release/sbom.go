// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// CycloneDXGomod is the SBOM generator, run with `go run` at this version
// from the module proxy: CycloneDX's own Go tool, which reads the module
// list every Go binary carries (`go version -m`). It stays out of gpufrac's
// go.mod.
const CycloneDXGomod = "github.com/CycloneDX/cyclonedx-gomod/cmd/cyclonedx-gomod@v1.10.0"

// sbom describes an image: cyclonedx-gomod's `bin` SBOM of each binary
// (path in the image to file), without serial number or timestamp, merged
// into one CycloneDX document whose subject is the image (a container
// component, name:version) and whose components and dependencies are the
// union of the binaries' (modules by their package URL). The timestamp is
// the release's SOURCE_DATE_EPOCH, so the document is reproducible. The
// host's C library in the image is not described: no Go tool can.
func (b *builder) sbom(ctx context.Context, ref, arch string, bins map[string]string) ([]byte, error) {
	var docs []map[string]any
	for _, inImage := range slices.Sorted(maps.Keys(bins)) {
		out := filepath.Join(b.work, "sbom-"+arch+"-"+filepath.Base(inImage)+".json")
		err := b.p.Run(ctx, "SBOM of "+inImage+" (linux/"+arch+", "+CycloneDXGomod+")", b.work, inherited(nil),
			"go", "run", CycloneDXGomod, "bin", "-json", "-noserial", "-notimestamp",
			"-version", "v"+b.opts.Version, "-output", out, bins[inImage])
		if err != nil {
			return nil, err
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			return nil, err
		}
		var doc map[string]any
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("%s: %w", out, err)
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no binaries to describe in %s", ref)
	}
	merged, err := mergeSBOMs(docs, ref, b.opts.Version, arch, slices.Sorted(maps.Keys(bins)), b.opts.Epoch)
	if err != nil {
		return nil, err
	}
	return json.MarshalIndent(merged, "", "  ")
}

// mergeSBOMs merges the binaries' documents (see sbom). A component or
// dependency that two binaries share appears once, its dependsOn the union.
func mergeSBOMs(docs []map[string]any, ref, version, arch string, paths []string, epoch time.Time) (map[string]any, error) {
	components := map[string]map[string]any{}
	deps := map[string]map[string]bool{}
	var binaries []any
	imageRef := "pkg:oci/gpufrac@" + version + "?arch=" + arch + "&repository_url=" + strings.TrimSuffix(ref, ":"+version)
	deps[imageRef] = map[string]bool{}
	for i, doc := range docs {
		meta, _ := doc["metadata"].(map[string]any)
		main, _ := meta["component"].(map[string]any)
		if main == nil {
			return nil, fmt.Errorf("SBOM of %s has no metadata.component", paths[i])
		}
		list, _ := doc["components"].([]any)
		for _, c := range append([]any{main}, list...) {
			comp, _ := c.(map[string]any)
			key, _ := comp["bom-ref"].(string)
			if key == "" {
				return nil, fmt.Errorf("SBOM of %s: a component without bom-ref", paths[i])
			}
			if _, ok := components[key]; !ok {
				components[key] = comp
			}
		}
		mainRef, _ := main["bom-ref"].(string)
		deps[imageRef][mainRef] = true
		binaries = append(binaries, map[string]any{"name": "gpufrac:binary", "value": paths[i] + " " + mainRef})
		depList, _ := doc["dependencies"].([]any)
		for _, d := range depList {
			dep, _ := d.(map[string]any)
			key, _ := dep["ref"].(string)
			if deps[key] == nil {
				deps[key] = map[string]bool{}
			}
			on, _ := dep["dependsOn"].([]any)
			for _, o := range on {
				if s, ok := o.(string); ok {
					deps[key][s] = true
				}
			}
		}
	}
	var compList []any
	for _, key := range slices.Sorted(maps.Keys(components)) {
		compList = append(compList, components[key])
	}
	var depList []any
	for _, key := range slices.Sorted(maps.Keys(deps)) {
		d := map[string]any{"ref": key}
		if on := slices.Sorted(maps.Keys(deps[key])); len(on) > 0 {
			d["dependsOn"] = on
		}
		depList = append(depList, d)
	}
	first, _ := docs[0]["metadata"].(map[string]any)
	return map[string]any{
		"$schema":     docs[0]["$schema"],
		"bomFormat":   "CycloneDX",
		"specVersion": cmp.Or(docs[0]["specVersion"], any("1.6")),
		"version":     1,
		"metadata": map[string]any{
			"timestamp":  epoch.UTC().Format(time.RFC3339),
			"tools":      first["tools"],
			"component":  map[string]any{"type": "container", "bom-ref": imageRef, "name": ref, "version": version},
			"properties": binaries,
		},
		"components":   compList,
		"dependencies": depList,
	}, nil
}
