// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package v1 is the on-disk schema of the kubelet plugin's checkpoint,
// version 1. It is separate from the in-memory plan types on purpose: those
// change with the code, this changes only by the rules below, because a
// plugin must read what any other release wrote on the same node (an
// upgrade reads an older file, a rollback a newer one).
//
// Rules for changing it:
//
//   - Every field has an explicit JSON name, and a name once written is
//     never renamed or given another meaning. The GPU fields keep the Go
//     field names (UUID, Index, ...) the first releases wrote, when that
//     struct had no tags.
//   - A compatible change only adds optional fields. Readers decode
//     tolerantly (unknown fields are ignored, the entry is kept), so an
//     older plugin keeps every claim a newer one wrote and, because an entry
//     it did not change is written back byte for byte, does not even drop
//     the newer fields.
//   - Fields are added inside entries only: an older plugin rewriting the
//     file keeps its entries' bytes but drops unknown fields of File and
//     Data.
//   - A change an older reader would misread (a field whose absence or
//     meaning changes what Unprepare must undo, a new State) needs a new
//     version. Such an entry, read by an older plugin, is quarantined: kept
//     and reported, and nothing it might own (CDI spec, MPS daemon) is
//     deleted because of it.
//   - Decoding version 1 and converting it to the in-memory types stays in
//     every later release; testdata/ holds a golden file of each version and
//     of each release's writer.
package v1
