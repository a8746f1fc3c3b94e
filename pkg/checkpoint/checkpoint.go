// Package checkpoint is the plugin's memory across restarts: which claims it
// prepared, with their plans, so that a restarted plugin answers Prepare
// without redoing side effects and can Unprepare a claim whose object is
// gone. It is a versioned JSON file with a checksum, rewritten atomically
// (temp file, fsync, rename, fsync of the directory) on every change, and
// void after a reboot, when every prepared container is gone too.
package checkpoint

import (
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
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/pkg/plan"
)

// Version is the format version this code writes and reads.
const Version = 1

// State is how far Prepare got for a claim.
type State string

const (
	// Started: Prepare began side effects; a crash here leaves work that
	// Unprepare or a retried Prepare must finish or undo.
	Started State = "Started"
	// Completed: every side effect is done and the devices were returned.
	Completed State = "Completed"
)

// Entry is one claim's record.
type Entry struct {
	State State      `json:"state"`
	Plan  plan.Claim `json:"plan"`
}

// Data is what the checksum covers.
type Data struct {
	BootID string              `json:"bootID"`
	Claims map[types.UID]Entry `json:"claims"`
}

type file struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

// Checkpoint is safe for concurrent use; every change is on disk before the
// call returns. Concurrent changes share one write (group commit): each
// change gets a generation, and one fsync of the file covers every
// generation it contains, so parallel Prepares do not queue behind each
// other's fsyncs.
type Checkpoint struct {
	path   string
	bootID string

	mu     sync.Mutex // guards claims, changed and gen
	claims map[types.UID]Entry
	// changed is the generation of each claim's latest change, so a failed
	// commit undoes its own change and never a later one.
	changed map[types.UID]uint64
	gen     uint64

	flushMu sync.Mutex // one writer of the file at a time
	flushed uint64     // highest generation on disk; guarded by flushMu
}

// Open loads the checkpoint at path, or starts an empty one. A checkpoint
// from another boot is discarded. One that cannot be read is moved aside
// (never silently overwritten) and the plugin starts empty.
func Open(ctx context.Context, path, bootID string) (*Checkpoint, error) {
	logger := klog.FromContext(ctx)
	c := &Checkpoint{path: path, bootID: bootID, claims: map[types.UID]Entry{}, changed: map[types.UID]uint64{}}
	raw, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return c, nil
	case err != nil:
		return nil, fmt.Errorf("reading checkpoint %s: %w", path, err)
	}
	d, err := Decode(raw)
	if err != nil {
		aside := fmt.Sprintf("%s.corrupt-%d", path, time.Now().Unix())
		if renameErr := os.Rename(path, aside); renameErr != nil {
			return nil, fmt.Errorf("checkpoint %s is unreadable (%v) and could not be moved aside: %w", path, err, renameErr)
		}
		logger.Error(err, "Checkpoint unreadable; moved aside, starting empty", "path", path, "movedTo", aside)
		return c, nil
	}
	if d.BootID != bootID {
		logger.Info("Checkpoint is from another boot; prepared claims did not survive the reboot", "path", path, "claims", len(d.Claims))
		return c, nil
	}
	c.claims = d.Claims
	return c, nil
}

// Decode parses and verifies a checkpoint file.
func Decode(raw []byte) (*Data, error) {
	var f file
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decoding checkpoint: %w", err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("checkpoint version %d, this plugin reads version %d", f.Version, Version)
	}
	if got := checksum(f.Data); got != f.Checksum {
		return nil, fmt.Errorf("checkpoint checksum %s does not match its data (%s): torn or edited", f.Checksum, got)
	}
	var d Data
	dec = json.NewDecoder(strings.NewReader(string(f.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decoding checkpoint data: %w", err)
	}
	if d.Claims == nil {
		d.Claims = map[types.UID]Entry{}
	}
	return &d, nil
}

// Encode renders a checkpoint file. Go's JSON encoder sorts map keys, so
// equal contents give equal bytes.
func Encode(bootID string, claims map[types.UID]Entry) ([]byte, error) {
	payload, err := json.Marshal(Data{BootID: bootID, Claims: claims})
	if err != nil {
		return nil, fmt.Errorf("encoding checkpoint data: %w", err)
	}
	return json.Marshal(file{Version: Version, Checksum: checksum(payload), Data: payload})
}

func checksum(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// Get returns a claim's entry.
func (c *Checkpoint) Get(uid types.UID) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.claims[uid]
	return e, ok
}

// Entries returns every entry, ordered by claim UID.
func (c *Checkpoint) Entries() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Entry, 0, len(c.claims))
	for _, e := range c.claims {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(string(a.Plan.UID), string(b.Plan.UID)) })
	return out
}

// Put records e for its claim and persists it.
func (c *Checkpoint) Put(e Entry) error {
	uid := e.Plan.UID
	c.mu.Lock()
	prev, had := c.claims[uid]
	c.claims[uid] = e
	gen := c.bump(uid)
	c.mu.Unlock()
	if err := c.commit(gen); err != nil {
		// Memory must not run ahead of disk.
		c.undo(uid, gen, prev, had)
		return err
	}
	return nil
}

// Delete forgets a claim and persists that; an unknown claim is a no-op.
func (c *Checkpoint) Delete(uid types.UID) error {
	c.mu.Lock()
	prev, had := c.claims[uid]
	if !had {
		c.mu.Unlock()
		return nil
	}
	delete(c.claims, uid)
	gen := c.bump(uid)
	c.mu.Unlock()
	if err := c.commit(gen); err != nil {
		c.undo(uid, gen, prev, true)
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

// undo restores uid's value from before the change of generation gen,
// unless a later change of uid happened since.
func (c *Checkpoint) undo(uid types.UID, gen uint64, prev Entry, had bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.changed[uid] != gen {
		return
	}
	if had {
		c.claims[uid] = prev
	} else {
		delete(c.claims, uid)
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
	raw, err := Encode(c.bootID, c.claims)
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if err := writeAtomically(c.path, raw); err != nil {
		return err
	}
	c.flushed = snapshot
	return nil
}

func writeAtomically(path string, raw []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating checkpoint directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating checkpoint temp file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // a no-op after the rename
	if _, err := tmp.Write(raw); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("syncing checkpoint: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("closing checkpoint: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replacing checkpoint: %w", err)
	}
	// The rename is durable only once the directory entry is.
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening checkpoint directory: %w", err)
	}
	defer func() { _ = d.Close() }()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing checkpoint directory: %w", err)
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
