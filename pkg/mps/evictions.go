package mps

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/pkg/cdihook"
	"github.com/gpufrac/gpufrac/pkg/plan"
)

// EvictionEvents, when Config.Events implements it, hears of MPS clients
// the daemon evicted to uphold another client's request.
type EvictionEvents interface {
	Evicted(c *plan.Claim, reason string)
}

// evictedLine is how the MPS double logs an eviction in control.log.
// NVIDIA documents that the daemon logs eviction counts per device, not
// this line's format (docs/nvidia-contract.md, items 22 and 23); the real
// daemon's line is for a GPU to show.
var evictedLine = regexp.MustCompile(`memacct: evicted client pid=(\d+) cgroup=(\S+) device=(\S+) for pid (\d+): (.*)$`)

// scanEvictions reads what the GPUs' daemons logged since the last scan and
// reports each evicted client on the claim whose container it was: the
// victim's cgroup ends in its container ID, which names the hook's record
// of the container (cdihook.RecordPath).
func (m *Manager) scanEvictions(ctx context.Context, logs map[string]string) {
	ev, ok := m.cfg.Events.(EvictionEvents)
	if !ok || m.cfg.RecordDir == "" {
		return
	}
	m.scanMu.Lock()
	defer m.scanMu.Unlock()
	for gpu, logDir := range logs {
		path := filepath.Join(logDir, "control.log")
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil && fi.Size() < m.logOffsets[path] {
			m.logOffsets[path] = 0 // a new daemon's log
		}
		if _, err := f.Seek(m.logOffsets[path], io.SeekStart); err == nil {
			r := bufio.NewReader(f)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					break // a partial last line is read again next time
				}
				m.logOffsets[path] += int64(len(line))
				if mm := evictedLine.FindStringSubmatch(strings.TrimSpace(line)); mm != nil {
					m.reportEviction(ctx, ev, gpu, mm[2], fmt.Sprintf("MPS evicted this claim's process %s on GPU %s: %s, above its request, and process %s, within its own request, needed the memory (NVIDIA: memacct eviction upholds requests); the process got CUDA_ERROR_MPS_CLIENT_TERMINATED",
						mm[1], mm[3], strings.TrimSpace(mm[5]), mm[4]))
				}
			}
		}
		_ = f.Close()
	}
}

func (m *Manager) reportEviction(ctx context.Context, ev EvictionEvents, gpu, cgroup, reason string) {
	id := filepath.Base(cgroup)
	for _, p := range []string{"cri-containerd-", "crio-", "docker-"} {
		id = strings.TrimPrefix(id, p)
	}
	id = strings.TrimSuffix(id, ".scope")
	matches, _ := filepath.Glob(cdihook.RecordPath(m.cfg.RecordDir, "*", id))
	for _, rec := range matches {
		uid := filepath.Base(filepath.Dir(rec))
		m.mu.Lock()
		var claim *plan.Claim
		for cuid, u := range m.users[gpu] {
			if string(cuid) == uid {
				c := u.claim
				claim = &c
			}
		}
		m.mu.Unlock()
		if claim != nil {
			klog.FromContext(ctx).Info("MPS evicted a client", "claim", klog.KRef(claim.Namespace, claim.Name), "gpu", gpu, "cgroup", cgroup)
			ev.Evicted(claim, reason)
		}
	}
}
