// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/filewrite"
	"github.com/gpufrac/gpufrac/internal/safetext"
)

// Pending status clears: after Unprepare deletes a claim's entry, the
// claim's status.devices still says Ready until the status writer's
// clearing write lands, a second or more later (claimstatus' clear delay).
// A plugin killed in between would forget the claim and leave that status
// until the claim is deallocated (kube-apiserver then drops the entries of
// deallocated devices itself) or for good while it stays allocated: the
// kubelet does not call Unprepare again after a success. So the delete
// also records the claim as "status to clear", and the writer reports the
// clear done; a restarted plugin clears whatever is still recorded.
//
// The records live in a file of their own beside the checkpoint
// (StatusClearsSuffix), not in it: the releases before the tolerant
// decoder refuse a checkpoint with any field they do not know, so a field
// there would make a rollback to them lose every prepared claim. An older
// release ignores the file; losing it loses only hints (the behaviour
// before it existed).
//
// The file is a log: a header line, then one JSON record per line,
// appended before the checkpoint write of the same commit, so a crash
// between the two leaves a record of a claim that is still prepared
// (ignored) and never a forgotten claim without its record. Records
// cleared since are dropped when the log is rewritten whole (atomically),
// which happens once it holds twice as many lines as records pending:
// Unprepare costs one small append, amortised, however many claims are
// pending. A line torn by a crash is reported and skipped.
//
// Each record names the pool (the node) whose entries are to be cleared
// (format v2); a node clears only its own pool's entries, so a record
// naming another pool is reported and dropped. Records of format v1 name
// none and are read as this node's (the writer clears its own pool's
// entries alone either way). The log is opened without following a link:
// a link planted in its place is not written through, only replaced.

// StatusClearsSuffix names the file of pending status clears beside the
// checkpoint file.
const StatusClearsSuffix = ".status-clears"

// MaxStatusClears bounds the pending clears kept (and read back). A node
// unprepares far fewer claims than this within one clear delay; past it a
// clear is not recorded, as before the records existed.
const MaxStatusClears = 4096

// maxStatusClearsFile bounds the file read at start: the log is rewritten
// before it holds 2*MaxStatusClears+64 lines of at most ~450 bytes.
const maxStatusClearsFile = 4 << 20

// statusClearsHeader is the log's first line; another version of the
// format changes it. statusClearsHeaderV1 is still read (records without
// a pool). A release that reads v1 alone ignores a v2 log, losing only
// hints.
const (
	statusClearsHeader   = "gpufrac status clears v2"
	statusClearsHeaderV1 = "gpufrac status clears v1"
)

// ClaimRef names a claim whose status still has to be cleared, and the
// pool whose entries are to go.
type ClaimRef struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Pool is empty in records of format v1 (read as this node's).
	Pool string `json:"pool,omitempty"`
}

// DeleteClearingStatus forgets a claim like Delete and, in the same commit,
// records that its status must be cleared (until StatusCleared). A claim
// with no entry changes nothing: no record, no write.
func (c *Checkpoint) DeleteClearingStatus(ref ClaimRef) error {
	return c.delete(ref.UID, &ref)
}

// recordClear records ref unless it is recorded already or the records
// are full, and says whether it did; c.mu held.
func (c *Checkpoint) recordClear(ref ClaimRef) bool {
	if _, ok := c.clears[ref.UID]; ok || len(c.clears) >= MaxStatusClears {
		return false
	}
	c.clears[ref.UID] = ref
	c.clearsToLog = append(c.clearsToLog, ref)
	return true
}

// StatusCleared drops the record of a claim whose status was cleared. No
// file is written for it: the log's next rewrite leaves it out, and a
// record that outlives a restart only costs one more clear, which finds
// nothing to clear. So Prepare never writes the log, and Unprepare appends
// one line.
func (c *Checkpoint) StatusCleared(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.clears, uid)
}

// PendingStatusClears returns the claims whose status still has to be
// cleared and that have no entry (a claim prepared again has its status
// rewritten instead), ordered by UID.
func (c *Checkpoint) PendingStatusClears() []ClaimRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ClaimRef, 0, len(c.clears))
	for uid, ref := range c.clears {
		if _, prepared := c.slots[uid]; !prepared {
			out = append(out, ref)
		}
	}
	sortRefs(out)
	return out
}

// PendingStatusClear returns the record of uid's pending clear, if any:
// an Unprepare of a claim no longer in the checkpoint clears what the
// record names, never what the call names.
func (c *Checkpoint) PendingStatusClear(uid types.UID) (ClaimRef, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ref, ok := c.clears[uid]
	return ref, ok
}

func sortRefs(refs []ClaimRef) {
	slices.SortFunc(refs, func(a, b ClaimRef) int { return strings.Compare(string(a.UID), string(b.UID)) })
}

// forgetClear drops uid's record when it is prepared again (its status is
// written anew); like StatusCleared it writes nothing. c.mu held.
func (c *Checkpoint) forgetClear(uid types.UID) {
	delete(c.clears, uid)
}

// clearsSnapshot takes what the log needs for this commit: the records to
// append, or every pending record when the log is due for a rewrite. It
// returns nil when nothing was added. c.mu and c.flushMu held.
func (c *Checkpoint) clearsSnapshot() (refs []ClaimRef, rewrite bool) {
	if len(c.clearsToLog) == 0 {
		return nil, false
	}
	if c.clearsLines == 0 || c.clearsLines+len(c.clearsToLog) > 2*len(c.clears)+64 {
		refs = make([]ClaimRef, 0, len(c.clears))
		for _, ref := range c.clears {
			refs = append(refs, ref)
		}
		sortRefs(refs)
		rewrite = true
	} else {
		refs = c.clearsToLog
	}
	c.clearsToLog = nil
	return refs, rewrite
}

// writeClears appends refs to the log, or rewrites it with them. A
// failure is logged, not returned: the records are hints, and an Unprepare
// must not fail (and the kubelet retry it forever) because a hint could
// not be written (the file replaced by a directory, removed by hand); the
// records stay in memory, and the next record added rewrites the log
// whole. c.flushMu held.
func (c *Checkpoint) writeClears(refs []ClaimRef, rewrite bool) {
	if err := c.writeClearsFile(refs, rewrite); err != nil {
		c.clearsLines = 0
		c.logger.Error(err, "Could not write the log of pending status clears; the claims' status is still cleared by this process, but a restart before that would not clear it", "path", c.path+StatusClearsSuffix, "records", len(refs))
	}
}

func (c *Checkpoint) writeClearsFile(refs []ClaimRef, rewrite bool) error {
	var buf []byte
	if rewrite {
		buf = append(buf, statusClearsHeader+"\n"...)
	}
	for _, ref := range refs {
		line, err := json.Marshal(ref)
		if err != nil {
			return fmt.Errorf("encoding a pending status clear: %w", err)
		}
		buf = append(append(buf, line...), '\n')
	}
	path := c.path + StatusClearsSuffix
	if rewrite {
		if err := filewrite.Atomic(path, buf, 0o600, c.counter); err != nil {
			return fmt.Errorf("writing pending status clears: %w", err)
		}
		c.clearsLines = len(refs) + 1
		return nil
	}
	// No O_CREATE: the log exists (clearsLines > 0); O_NOFOLLOW: never
	// through a link planted since.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("appending pending status clears: %w", err)
	}
	_, err = f.Write(buf)
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("appending pending status clears: %w", err)
	}
	c.counter.AddWrite()
	c.clearsLines += len(refs)
	return nil
}

// loadClears reads the log. It is read whatever boot wrote it: a claim
// unprepared before a reboot may still show Ready in the API until it is
// cleared. What cannot be read is only logged, as losing hints is what
// happened before they existed.
func (c *Checkpoint) loadClears(ctx context.Context) {
	logger := klog.FromContext(ctx)
	path := c.path + StatusClearsSuffix
	refs, lines, err := readClears(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		// Records that were read are used; the rest is reported.
		logger.Error(err, "Pending status clears unreadable in part or whole; what could not be read is ignored (those claims, unprepared just before the restart, may keep a Ready status)", "path", path, "read", len(refs))
	}
	for _, ref := range refs {
		if len(c.clears) >= MaxStatusClears {
			break
		}
		if _, prepared := c.slots[ref.UID]; prepared {
			continue // prepared again since: its status is written, not cleared
		}
		c.clears[ref.UID] = ref
	}
	// A log that could not be read whole is rewritten at the next record
	// (clearsLines 0); one that was is appended to.
	if err == nil {
		c.clearsLines = lines
	}
}

// readClears decodes the log, bounded, skipping lines that are torn or do
// not name a claim; it returns the records, the number of lines, and what
// was wrong.
func readClears(path string) ([]ClaimRef, int, error) {
	// A link in the log's place is not followed (ELOOP): the log is then
	// rewritten at the next record, replacing the link itself.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, maxStatusClearsFile+1))
	if err != nil {
		return nil, 0, fmt.Errorf("reading pending status clears: %w", err)
	}
	if len(raw) > maxStatusClearsFile {
		return nil, 0, fmt.Errorf("pending status clears: file larger than %d bytes", maxStatusClearsFile)
	}
	lines := strings.Split(string(raw), "\n")
	if lines[0] != statusClearsHeader && lines[0] != statusClearsHeaderV1 {
		return nil, 0, fmt.Errorf("pending status clears: first line %q is neither %q nor %q", safetext.Cap(lines[0], 64), statusClearsHeader, statusClearsHeaderV1)
	}
	if last := len(lines) - 1; lines[last] == "" {
		lines = lines[:last] // the newline ending the last record
	}
	var bad []string
	var out []ClaimRef
	for i, line := range lines[1:] {
		var ref ClaimRef
		if err := json.Unmarshal([]byte(line), &ref); err != nil {
			bad = append(bad, fmt.Sprintf("line %d (torn by a crash?): %v", i+2, err))
			continue
		}
		if !plan.ValidUID(string(ref.UID)) || len(validation.IsDNS1123Label(ref.Namespace)) > 0 || len(validation.IsDNS1123Subdomain(ref.Name)) > 0 {
			bad = append(bad, fmt.Sprintf("line %d: %q/%q (uid %q) does not name a claim",
				i+2, safetext.Cap(ref.Namespace, 64), safetext.Cap(ref.Name, 256), safetext.Cap(string(ref.UID), 64)))
			continue
		}
		if ref.Pool != "" && len(validation.IsDNS1123Subdomain(ref.Pool)) > 0 {
			bad = append(bad, fmt.Sprintf("line %d: pool %q is not a node's pool", i+2, safetext.Cap(ref.Pool, 256)))
			continue
		}
		out = append(out, ref)
	}
	if len(bad) > 0 {
		return out, len(lines), errors.New("pending status clears: " + safetext.Join(bad, "; ", 4096))
	}
	return out, len(lines), nil
}
