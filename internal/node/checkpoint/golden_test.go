// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite testdata/v1-later-schema.json from testdata/v1-strict-release.json")

// goldens are checkpoint files as each release wrote them, or will. A file
// here is never edited or removed: every later release must read it.
var goldens = []struct {
	file            string
	claims          []types.UID // understood entries, sorted
	quarantined     []types.UID
	writtenVerbatim bool // this release writes the same bytes for the same claims
}{
	// Written by the releases whose decoder was strict (unknown fields
	// refused, any other version refused).
	{"v1-strict-release.json", []types.UID{"uid-sm", "uid-started", "uid-ts"}, nil, true},
	// What a later release that adds fields to version 1 (and a state and a
	// compute mode this one does not know) writes.
	{"v1-later-schema.json", []types.UID{"uid-sm", "uid-started", "uid-ts"}, []types.UID{"uid-mig", "uid-unpreparing"}, false},
}

func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestGoldenFilesOfEveryVersion(t *testing.T) {
	for _, g := range goldens {
		t.Run(g.file, func(t *testing.T) {
			raw := readGolden(t, g.file)
			d, err := checkpoint.Decode(raw)
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedKeys(d.Claims); !slices.Equal(got, g.claims) {
				t.Errorf("claims %v, want %v", got, g.claims)
			}
			if got := sortedKeys(d.Quarantined); !slices.Equal(got, g.quarantined) {
				t.Errorf("quarantined %v, want %v", got, g.quarantined)
			}
			// Rewritten as read, no entry loses anything: not the fields of
			// a later release, not the quarantined entries. (Fields a later
			// release adds outside the entries are dropped; api/v1 forbids
			// putting anything there that Unprepare needs.)
			again, err := d.Encode()
			if err != nil {
				t.Fatal(err)
			}
			if got, want := claimsJSON(t, again), claimsJSON(t, raw); !bytes.Equal(got, want) {
				t.Errorf("rewriting the file as read changed its entries:\n%s\n%s", want, got)
			}
			if g.writtenVerbatim {
				fresh, err := checkpoint.Encode(d.BootID, d.Claims)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(fresh, raw) {
					t.Errorf("this release writes these claims differently from the golden file, which older releases must read:\n%s\n%s", raw, fresh)
				}
			}
		})
	}
}

// claimsJSON is a file's data.claims, compacted.
func claimsJSON(t *testing.T, raw []byte) []byte {
	t.Helper()
	var f struct {
		Data struct {
			Claims json.RawMessage `json:"claims"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, f.Data.Claims); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func sortedKeys[V any](m map[types.UID]V) []types.UID {
	var out []types.UID
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestGenerateLaterSchemaGolden rewrites the later-schema golden file when
// run with -update-golden; otherwise it checks the file still is what the
// generator makes.
func TestGenerateLaterSchemaGolden(t *testing.T) {
	var f struct {
		Version int                        `json:"version"`
		Data    map[string]json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(readGolden(t, "v1-strict-release.json"), &f); err != nil {
		t.Fatal(err)
	}
	var claims map[string]map[string]any
	if err := json.Unmarshal(f.Data["claims"], &claims); err != nil {
		t.Fatal(err)
	}
	for _, e := range claims {
		e["preparedAt"] = "2027-03-01T10:00:00Z"
		p := e["plan"].(map[string]any)
		p["generation"] = 3
		for _, dev := range p["devices"].([]any) {
			d := dev.(map[string]any)
			d["numaNode"] = 1
			d["gpu"].(map[string]any)["DriverVersion"] = "615.10"
			if m, ok := d["mps"].(map[string]any); ok {
				m["serverName"] = "gpufrac"
			}
		}
	}
	unpreparing := cloneJSON(t, claims["uid-ts"])
	unpreparing["state"] = "Unpreparing"
	unpreparing["plan"].(map[string]any)["uid"] = "uid-unpreparing"
	claims["uid-unpreparing"] = unpreparing
	mig := cloneJSON(t, claims["uid-sm"])
	mig["plan"].(map[string]any)["uid"] = "uid-mig"
	mig["plan"].(map[string]any)["devices"].([]any)[0].(map[string]any)["computeMode"] = "MIG"
	claims["uid-mig"] = mig

	data, err := json.Marshal(map[string]any{"bootID": json.RawMessage(f.Data["bootID"]), "claims": claims, "nodeName": "node-1"})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	out, err := json.Marshal(map[string]any{"version": 1, "writer": "gpufrac vNext", "checksum": "sha256:" + hex.EncodeToString(sum[:]), "data": json.RawMessage(data)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "v1-later-schema.json")
	if *updateGolden {
		if err := os.WriteFile(path, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(readGolden(t, "v1-later-schema.json"), out) {
		t.Errorf("%s is not what its generator makes; golden files are never edited (run with -update-golden only when adding one)", path)
	}
}

func cloneJSON(t *testing.T, v map[string]any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
