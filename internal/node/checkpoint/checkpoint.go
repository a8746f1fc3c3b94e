// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package checkpoint is the plugin's memory across restarts: which claims it
// prepared, with their plans, so that a restarted plugin answers Prepare
// without redoing side effects and can Unprepare a claim whose object is
// gone. It is a versioned JSON file with a checksum, replaced atomically
// (temp file, rename) on every change, and void after a reboot, when every
// prepared container is gone too. It is not fsynced: what a power loss
// could lose is void after the reboot it causes (docs/reliability.md); a
// durable boot marker beside it tells a file torn by that power loss from
// one damaged in this boot.
package checkpoint

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	v1 "github.com/gpufrac/gpufrac/internal/node/checkpoint/api/v1"
	"github.com/gpufrac/gpufrac/internal/node/filewrite"
)

// Version is the format version this code writes; Decode reads it and
// every earlier one (see api/v1 for the rules).
const Version = v1.Version

// State is how far Prepare got for a claim.
type State string

const (
	// Started means Prepare began side effects; a crash here leaves work that
	// Unprepare or a retried Prepare must finish or undo.
	Started State = v1.StateStarted
	// Completed means every side effect is done and the devices were returned.
	Completed State = v1.StateCompleted
)

// Entry is one claim's record, in memory.
type Entry struct {
	State State
	Plan  plan.Claim
}

// Quarantined is an entry this release could not understand: written by a
// later release with a meaning this one does not know, or damaged. It is
// kept in the file as it was and reported; nothing it might own (a CDI
// spec, an MPS daemon) is removed because of it.
type Quarantined struct {
	UID    types.UID
	Reason string
	Raw    json.RawMessage
}

// Data is a decoded checkpoint file.
type Data struct {
	BootID      string
	Claims      map[types.UID]Entry
	Quarantined map[types.UID]Quarantined
	// raw holds every entry's bytes as read, so entries nobody changes
	// are written back exactly, fields of later releases included.
	raw map[types.UID][]byte
}

// slot is one claim's record with its on-disk bytes.
type slot struct {
	entry       Entry
	quarantined *Quarantined
	// enc is the entry as it is (or will be) on disk: encoded once per
	// change, so a commit only concatenates.
	enc []byte
}

// Checkpoint is safe for concurrent use; every change is in the file (in
// the page cache, which outlives the process) before the call returns.
// Concurrent changes share one write (group commit): each change gets a
// generation, and one write of the file covers every generation it
// contains, so parallel Prepares do not queue behind each other's writes.
type Checkpoint struct {
	path   string
	bootID string
	// counter counts the file writes and fsyncs; nil counts nothing.
	counter *filewrite.Counter
	// unreadable says why the file found at Open could not be read at all
	// (it was moved aside); empty when it could.
	unreadable string
	// logger reports what is not an error of a call (statusclears.go).
	logger klog.Logger

	mu    sync.Mutex // guards slots, changed and gen
	slots map[types.UID]slot
	// changed is the generation of each claim's latest change, so a failed
	// commit undoes its own change and never a later one.
	changed map[types.UID]uint64
	gen     uint64
	// clears are the claims whose status must still be cleared
	// (statusclears.go); clearsToLog the records added since the log was
	// last written, and clearsLines (guarded by flushMu) its lines.
	clears      map[types.UID]ClaimRef
	clearsToLog []ClaimRef
	clearsLines int

	flushMu sync.Mutex // one writer of the file at a time
	flushed uint64     // highest generation on disk; guarded by flushMu
}

// Option configures a Checkpoint.
type Option func(*Checkpoint)

// WithCounter counts the checkpoint's file writes and fsyncs in counter.
func WithCounter(counter *filewrite.Counter) Option {
	return func(c *Checkpoint) { c.counter = counter }
}

// BootMarkerSuffix names the boot marker beside the checkpoint file.
const BootMarkerSuffix = ".boot"

// Open loads the checkpoint at path, or starts an empty one. A checkpoint
// from another boot is discarded. One that cannot be read at all is moved
// aside (never silently overwritten); if the boot marker shows it was last
// written in another boot (a power loss tore the unsynced file) it is
// discarded like any checkpoint of another boot, otherwise the plugin
// starts empty and Unreadable says so. Entries that cannot be understood
// are quarantined.
func Open(ctx context.Context, path, bootID string, opts ...Option) (*Checkpoint, error) {
	c := &Checkpoint{path: path, bootID: bootID, slots: map[types.UID]slot{}, changed: map[types.UID]uint64{}, clears: map[types.UID]ClaimRef{},
		logger: klog.FromContext(ctx)}
	for _, o := range opts {
		o(c)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("creating checkpoint directory: %w", err)
	}
	markedBoot, err := c.readBootMarker()
	if err != nil {
		return nil, err
	}
	if err := c.load(ctx, markedBoot); err != nil {
		return nil, err
	}
	c.loadClears(ctx)
	// Before this process writes the checkpoint for the first time, the
	// marker names this boot, durably.
	if markedBoot != bootID {
		if err := filewrite.Durable(path+BootMarkerSuffix, []byte(bootID+"\n"), 0o600, c.counter); err != nil {
			return nil, fmt.Errorf("writing the checkpoint's boot marker: %w", err)
		}
	}
	return c, nil
}

// readBootMarker returns the boot the checkpoint file was last written in,
// as the marker says, or "" when there is no marker (a release before it).
func (c *Checkpoint) readBootMarker() (string, error) {
	raw, err := readBounded(c.path+BootMarkerSuffix, maxBootMarkerBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("reading the checkpoint's boot marker: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}

func (c *Checkpoint) load(ctx context.Context, markedBoot string) error {
	logger := klog.FromContext(ctx)
	path, bootID := c.path, c.bootID
	raw, err := readBounded(path, maxCheckpointBytes)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil && !errors.Is(err, errTooLarge):
		return fmt.Errorf("reading checkpoint %s: %w", path, err)
	}
	var d *Data
	if err == nil {
		// Far too large to be ours is as unreadable as torn.
		d, err = Decode(raw)
	}
	if err != nil {
		aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if renameErr := os.Rename(path, aside); renameErr != nil {
			return fmt.Errorf("checkpoint %s is unreadable (%v) and could not be moved aside: %w", path, err, renameErr)
		}
		if markedBoot != "" && markedBoot != bootID {
			// Written, unsynced, in an earlier boot: a power loss may tear
			// it, and whatever it said is void after the reboot anyway.
			logger.Info("Checkpoint of another boot is unreadable (torn by a power loss?); moved aside and discarded like any checkpoint of another boot", "path", path, "movedTo", aside, "reason", err.Error())
			return nil
		}
		c.unreadable = fmt.Sprintf("%v; moved to %s", err, aside)
		logger.Error(err, "Checkpoint unreadable; moved aside, starting empty. CDI specs and MPS daemons on this node are kept until the kubelet unprepares their claims", "path", path, "movedTo", aside)
		return nil
	}
	if d.BootID != bootID {
		logger.Info("Checkpoint is from another boot; prepared claims did not survive the reboot", "path", path, "claims", len(d.Claims)+len(d.Quarantined))
		return nil
	}
	for uid, e := range d.Claims {
		c.slots[uid] = slot{entry: e, enc: d.raw[uid]}
	}
	for uid, q := range d.Quarantined {
		c.slots[uid] = slot{quarantined: &q, enc: q.Raw}
		logger.Error(errors.New(q.Reason), "Checkpoint entry not understood by this plugin version; quarantined: kept as it is, and its CDI spec and MPS daemon are not removed", "path", path, "claimUID", uid)
	}
	return nil
}

// Decode parses and verifies a checkpoint file of any version this release
// reads. Decoding is tolerant: unknown fields are ignored, and an entry
// that cannot be understood is returned in Quarantined, not as an error.
func Decode(raw []byte) (*Data, error) {
	var f v1.File
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("decoding checkpoint: %w", err)
	}
	switch {
	case f.Version == v1.Version:
		return decodeV1(&f)
	case f.Version > Version:
		return nil, fmt.Errorf("checkpoint version %d was written by a later release; this plugin reads versions 1 to %d (roll forward, or see docs/operations.md)", f.Version, Version)
	default:
		return nil, fmt.Errorf("checkpoint version %d is unknown; this plugin reads versions 1 to %d", f.Version, Version)
	}
}

func decodeV1(f *v1.File) (*Data, error) {
	if got := checksum(f.Data); got != f.Checksum {
		return nil, fmt.Errorf("checkpoint checksum %s does not match its data (%s): torn or edited", f.Checksum, got)
	}
	var vd v1.Data
	if err := json.Unmarshal(f.Data, &vd); err != nil {
		return nil, fmt.Errorf("decoding checkpoint data: %w", err)
	}
	d := &Data{BootID: vd.BootID, Claims: map[types.UID]Entry{}, Quarantined: map[types.UID]Quarantined{}, raw: map[types.UID][]byte{}}
	for key, rawEntry := range vd.Claims {
		uid := types.UID(key)
		var compact bytes.Buffer
		if err := json.Compact(&compact, rawEntry); err != nil {
			return nil, fmt.Errorf("decoding checkpoint entry %q: %w", key, err)
		}
		d.raw[uid] = compact.Bytes()
		e, err := decodeEntryV1(key, rawEntry)
		if err != nil {
			d.Quarantined[uid] = Quarantined{UID: uid, Reason: fmt.Sprintf("checkpoint entry %q: %v", key, err), Raw: compact.Bytes()}
			continue
		}
		d.Claims[uid] = e
	}
	return d, nil
}

// Encode renders a checkpoint file of the current version. Entries are
// sorted by UID, so equal contents give equal bytes.
func Encode(bootID string, claims map[types.UID]Entry) ([]byte, error) {
	enc := make(map[types.UID][]byte, len(claims))
	for uid, e := range claims {
		raw, err := encodeEntry(&e)
		if err != nil {
			return nil, err
		}
		enc[uid] = raw
	}
	return encodeFile(bootID, enc)
}

// Encode renders d again: entries as read (so fields of later releases
// survive), quarantined ones included.
func (d *Data) Encode() ([]byte, error) {
	enc := make(map[types.UID][]byte, len(d.Claims)+len(d.Quarantined))
	for uid, e := range d.Claims {
		if raw, ok := d.raw[uid]; ok {
			enc[uid] = raw
			continue
		}
		raw, err := encodeEntry(&e)
		if err != nil {
			return nil, err
		}
		enc[uid] = raw
	}
	for uid, q := range d.Quarantined {
		enc[uid] = q.Raw
	}
	return encodeFile(d.BootID, enc)
}

// encodeFile assembles a file from encoded entries: the same bytes
// encoding/json gives for the v1 types, without re-encoding each entry.
func encodeFile(bootID string, entries map[types.UID][]byte) ([]byte, error) {
	keys := make([]types.UID, 0, len(entries))
	size := 64
	for uid, raw := range entries {
		keys = append(keys, uid)
		size += len(uid) + len(raw) + 4
	}
	slices.Sort(keys)
	quotedBoot, err := json.Marshal(bootID)
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint boot id: %w", err)
	}
	data := make([]byte, 0, size)
	data = append(data, `{"bootID":`...)
	data = append(data, quotedBoot...)
	data = append(data, `,"claims":{`...)
	for i, uid := range keys {
		if i > 0 {
			data = append(data, ',')
		}
		quoted, err := json.Marshal(string(uid))
		if err != nil {
			return nil, fmt.Errorf("encoding checkpoint key %q: %w", uid, err)
		}
		data = append(data, quoted...)
		data = append(data, ':')
		data = append(data, entries[uid]...)
	}
	data = append(data, "}}"...)
	sum := checksum(data)
	out := make([]byte, 0, len(data)+len(sum)+48)
	out = append(out, `{"version":`...)
	out = strconv.AppendInt(out, Version, 10)
	out = append(out, `,"checksum":"`...)
	out = append(out, sum...)
	out = append(out, `","data":`...)
	out = append(out, data...)
	out = append(out, '}')
	return out, nil
}

func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Unreadable says why the checkpoint found at Open could not be read at
// all, or "" when it could (or there was none).
func (c *Checkpoint) Unreadable() string { return c.unreadable }

// Get returns a claim's entry; quarantined entries are not returned.
func (c *Checkpoint) Get(uid types.UID) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.slots[uid]
	if !ok || s.quarantined != nil {
		return Entry{}, false
	}
	return s.entry, true
}

// Entries returns every understood entry, ordered by claim UID.
func (c *Checkpoint) Entries() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Entry, 0, len(c.slots))
	for _, s := range c.slots {
		if s.quarantined == nil {
			out = append(out, s.entry)
		}
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(string(a.Plan.UID), string(b.Plan.UID)) })
	return out
}

// Quarantined returns the entries this release could not understand,
// ordered by claim UID.
func (c *Checkpoint) Quarantined() []Quarantined {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Quarantined
	for _, s := range c.slots {
		if s.quarantined != nil {
			out = append(out, *s.quarantined)
		}
	}
	slices.SortFunc(out, func(a, b Quarantined) int { return strings.Compare(string(a.UID), string(b.UID)) })
	return out
}

// Quarantine sets an entry aside as if this release could not understand
// it (the preparer's bounds refused what it holds, see plan.CheckRecorded):
// it stays in the file as it is, nothing it might own is removed because
// of it, and Quarantined reports it with reason. Nothing is written.
func (c *Checkpoint) Quarantine(uid types.UID, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.slots[uid]
	if !ok || s.quarantined != nil {
		return
	}
	c.slots[uid] = slot{quarantined: &Quarantined{UID: uid, Reason: reason, Raw: s.enc}, enc: s.enc}
}

// Put records e for its claim (replacing a quarantined entry of the same
// claim) and persists it. An entry this release could not read back is
// refused.
func (c *Checkpoint) Put(e Entry) error {
	persist, err := c.Stage(e)
	if err != nil {
		return err
	}
	return persist()
}

// Stage records e in memory, where Get and Entries see it at once, and
// returns the function that persists it; until that returns nil the entry
// must be treated as not written. A failed persist removes the staged
// entry again (unless a later change of the claim replaced it). Stage lets
// a caller order entries under its own lock without holding that lock
// across the file write.
func (c *Checkpoint) Stage(e Entry) (persist func() error, err error) {
	uid := e.Plan.UID
	v := toV1(&e)
	if err := understoodV1(string(uid), &v); err != nil {
		return nil, fmt.Errorf("checkpoint entry of claim %s/%s: %w", e.Plan.Namespace, e.Plan.Name, err)
	}
	enc, err := encodeEntry(&e)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	prev, had := c.slots[uid]
	c.slots[uid] = slot{entry: e, enc: enc}
	gen := c.bump(uid)
	// Prepared again: its status is written anew, not cleared.
	c.forgetClear(uid)
	c.mu.Unlock()
	return func() error {
		if err := c.commit(gen); err != nil {
			// Memory must not run ahead of disk.
			c.undo(uid, gen, prev, had)
			return err
		}
		return nil
	}, nil
}

// Delete forgets a claim, quarantined or not, and persists that; an
// unknown claim is a no-op.
func (c *Checkpoint) Delete(uid types.UID) error {
	return c.delete(uid, nil)
}

// delete forgets uid and, with toClear set, records its pending status
// clear in the same commit (statusclears.go); a failed commit undoes both.
func (c *Checkpoint) delete(uid types.UID, toClear *ClaimRef) error {
	c.mu.Lock()
	prev, had := c.slots[uid]
	if !had {
		c.mu.Unlock()
		return nil
	}
	delete(c.slots, uid)
	gen := c.bump(uid)
	added := toClear != nil && c.recordClear(*toClear)
	c.mu.Unlock()
	if err := c.commit(gen); err != nil {
		c.undo(uid, gen, prev, true)
		if added {
			c.mu.Lock()
			if c.changed[uid] == gen {
				delete(c.clears, uid)
			}
			c.mu.Unlock()
		}
		return err
	}
	return nil
}

// bump starts a new generation for a change of uid; c.mu must be held.
func (c *Checkpoint) bump(uid types.UID) uint64 {
	c.gen++
	c.changed[uid] = c.gen
	return c.gen
}

// undo restores uid's slot from before the change of generation gen,
// unless a later change of uid happened since.
func (c *Checkpoint) undo(uid types.UID, gen uint64, prev slot, had bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed[uid] != gen {
		return
	}
	if had {
		c.slots[uid] = prev
	} else {
		delete(c.slots, uid)
	}
}

// commit returns once generation gen is on disk, writing the file itself
// unless a write that started after gen already covered it.
func (c *Checkpoint) commit(gen uint64) error {
	c.flushMu.Lock()
	defer c.flushMu.Unlock()
	if c.flushed >= gen {
		return nil
	}
	c.mu.Lock()
	snapshot := c.gen
	entries := make(map[types.UID][]byte, len(c.slots))
	for uid, s := range c.slots {
		entries[uid] = s.enc // never mutated once stored
	}
	clears, rewriteClears := c.clearsSnapshot()
	c.mu.Unlock()
	raw, err := encodeFile(c.bootID, entries)
	if err != nil {
		return err
	}
	if clears != nil {
		// Before the checkpoint: a crash between the two writes must not
		// leave a claim forgotten without its record (statusclears.go).
		c.writeClears(clears, rewriteClears)
	}
	if err := c.writeAtomically(raw); err != nil {
		return err
	}
	c.flushed = snapshot
	return nil
}

func (c *Checkpoint) writeAtomically(raw []byte) error {
	if err := filewrite.Atomic(c.path, raw, 0o600, c.counter); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	return nil
}

// BootID reads the kernel's boot id; it changes on every boot.
func BootID() (string, error) {
	raw, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", fmt.Errorf("reading boot id: %w", err)
	}
	return strings.TrimSpace(string(raw)), nil
}
