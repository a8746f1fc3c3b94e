// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package helm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"slices"

	"github.com/gpufrac/gpufrac/hack/harness"
)

// laterSchemaField is a field no gpufrac release writes yet: what a later
// checkpoint schema adds to each claim's entry. No later release exists to
// build, so the test writes it where the upgraded plugin keeps its
// checkpoint, standing in for a later release's writer (the checksum is
// recomputed as that writer would). The rolled-back plugin must then keep
// every prepared claim and carry the field through its own rewrites
// (internal/node/checkpoint: tolerant decoding, entries it does not change keep
// their bytes; docs/operations.md).
const laterSchemaField = "laterReleaseField"

var checkpointPath = filepath.Join(harness.ChartPluginDataDir, "checkpoint.json")

// checkpointEntries reads the node's checkpoint file: its top-level
// fields, its data's fields and each claim's entry, by UID.
func (e *releaseEnv) checkpointEntries() (file, data map[string]json.RawMessage, claims map[string]map[string]json.RawMessage) {
	e.t.Helper()
	raw, err := e.node.ReadFile(checkpointPath)
	if err != nil {
		e.t.Fatalf("reading the plugin's checkpoint: %v", err)
	}
	if err := json.Unmarshal(raw, &file); err != nil {
		e.t.Fatalf("the plugin's checkpoint: %v", err)
	}
	if err := json.Unmarshal(file["data"], &data); err != nil {
		e.t.Fatalf("the plugin's checkpoint data: %v", err)
	}
	if err := json.Unmarshal(data["claims"], &claims); err != nil {
		e.t.Fatalf("the plugin's checkpoint claims: %v", err)
	}
	return file, data, claims
}

// writeLaterSchema adds laterSchemaField to every entry of the node's
// checkpoint and returns the claims' UIDs.
func (e *releaseEnv) writeLaterSchema() []string {
	e.t.Helper()
	file, data, claims := e.checkpointEntries()
	var uids []string
	for uid, entry := range claims {
		entry[laterSchemaField] = json.RawMessage(`{"since":"a later schema"}`)
		uids = append(uids, uid)
	}
	if len(uids) == 0 {
		e.t.Fatal("the upgraded plugin's checkpoint holds no claim; the running pods' claims should be there")
	}
	var err error
	if data["claims"], err = json.Marshal(claims); err != nil {
		e.t.Fatal(err)
	}
	rawData, err := json.Marshal(data)
	if err != nil {
		e.t.Fatal(err)
	}
	sum := sha256.Sum256(rawData)
	file["data"] = rawData
	file["checksum"], _ = json.Marshal("sha256:" + hex.EncodeToString(sum[:]))
	out, err := json.Marshal(file)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.node.WriteFile(checkpointPath, out); err != nil {
		e.t.Fatalf("writing the later schema's checkpoint: %v", err)
	}
	slices.Sort(uids)
	e.t.Logf("the checkpoint now holds %d claims in a later schema (field %q on each)", len(uids), laterSchemaField)
	return uids
}

// checkLaterSchemaKept checks that each claim of uids is still in the
// checkpoint with the later schema's field.
func (e *releaseEnv) checkLaterSchemaKept(when string, uids []string) {
	e.t.Helper()
	_, _, claims := e.checkpointEntries()
	for _, uid := range uids {
		entry, ok := claims[uid]
		switch {
		case !ok:
			e.t.Errorf("%s: claim %s is no longer in the checkpoint", when, uid)
		case entry[laterSchemaField] == nil:
			e.t.Errorf("%s: claim %s lost the later schema's field %q", when, uid, laterSchemaField)
		}
	}
	e.t.Logf("%s: %d claims kept, each with the later schema's field", when, len(uids))
}
