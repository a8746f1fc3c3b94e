// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/node/incident"
)

// The daemon's log lines this reader turns into incidents. NVIDIA
// documents the eviction (v3mem "MPS Pressure Handling and Eviction"),
// that the daemon logs per-device eviction counts, and that a fatal GPU
// exception of one client reaches every client sharing the GPU ("Memory
// Protection and Error Containment"); it documents the format of none of
// these lines, nor of the refusal of new clients while the GPU waits for
// the clients a fault reached to exit. The formats below are the MPS
// double's (test/mpsdouble), marked inferred in docs/design/nvidia/mps.md
// (items 23 and 29) until test/gpu/run.sh shows the real daemon's lines.
var (
	// memacct: evicted client pid=7 cgroup=/kubepods/.../<id> device=GPU-a for pid 9 cgroup=/kubepods/.../<id>: used ...
	evictedLine = regexp.MustCompile(`memacct: evicted client pid=(\d+) cgroup=(\S+) device=(\S+) for pid (\d+)(?: cgroup=(\S+))?: (.*)$`)
	// server: fatal GPU exception on device=GPU-a raised by pid=9 cgroup=/kubepods/.../<id>
	faultLine = regexp.MustCompile(`server: fatal GPU exception on device=(\S+) raised by pid=(\d+) cgroup=(\S+)`)
	// client terminated: pid=7 cgroup=/kubepods/.../<id> device=GPU-a route=gpufrac/c0123: <why>
	terminatedLine = regexp.MustCompile(`client terminated: pid=(\d+) cgroup=(\S+) device=(\S+) route=(\S+): (.*)$`)
	// client refused: pid=12 cgroup=/kubepods/.../<id> device=GPU-a: server not ready: ...: pid=8 cgroup=/kubepods/.../<id>, ...
	refusedLine = regexp.MustCompile(`client refused: pid=(\d+) cgroup=(\S+) device=(\S+): (.*)$`)
	// The first client the refusal waits for.
	lingeringClient = regexp.MustCompile(`pid=(\d+) cgroup=([^\s,]+)`)
)

// ownTerminations are the reasons for which gpufrac itself ends clients
// (draining a departing claim, deleting its namespace, removing an unused
// daemon): not incidents. An eviction is reported from its memacct line.
var ownTerminations = []string{"client terminate", "namespace deleted", "server deleted", "evicted:"}

// WatchTerminations implements incident.MPSEventSource: report hears of
// every client the GPUs' daemons evicted, terminated or refused, from the scans of
// their control logs (at each reconcile and before a claim's release, so
// that a victim whose pod ends at once is still a known user). Log lines
// read before report is registered wait for it.
func (m *Manager) WatchTerminations(report func(incident.MPSEvent)) {
	m.scanMu.Lock()
	defer m.scanMu.Unlock()
	m.report = report
}

// scanEvictions reads what the GPUs' daemons logged since the last scan and
// reports each evicted or terminated client of a claim this manager
// serves: the victim's cgroup ends in its container ID, which names the
// hook's record of the container (record.Path), and so its claim
// and pod.
func (m *Manager) scanEvictions(ctx context.Context, logs map[string]string) {
	if m.cfg.RecordDir == "" {
		return
	}
	m.scanMu.Lock()
	defer m.scanMu.Unlock()
	if m.report == nil {
		return
	}
	for key, logDir := range logs {
		path := filepath.Join(logDir, "control.log")
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if fi, err := f.Stat(); err == nil && fi.Size() < m.logOffsets[path] {
			m.logOffsets[path] = 0 // a new daemon's log
		}
		if _, err := f.Seek(m.logOffsets[path], io.SeekStart); err == nil {
			var fault *faulter
			r := bufio.NewReader(f)
			for {
				line, err := r.ReadString('\n')
				if err != nil {
					break // a partial last line is read again next time
				}
				m.logOffsets[path] += int64(len(line))
				// The node server logs every GPU of the node; a GPU's
				// daemon only its own.
				if ev, ok := m.parseLine(strings.TrimSpace(line), &fault); ok && (ev.GPUUUID == key || key == mpslayout.NodeServerKey) {
					m.deliver(ctx, key, ev)
				}
			}
		}
		_ = f.Close()
	}
}

// faulter is the client whose fatal GPU exception precedes the
// terminations it caused in the log.
type faulter struct {
	gpu    string
	pid    int
	cgroup string
}

// parseLine turns one log line into an event whose victim and requester
// are still named by cgroup (Namespace/RequesterNamespace hold the
// cgroups until deliver resolves them).
func (m *Manager) parseLine(line string, fault **faulter) (incident.MPSEvent, bool) {
	now := time.Now()
	if mm := evictedLine.FindStringSubmatch(line); mm != nil {
		pid, _ := strconv.Atoi(mm[1])
		req, _ := strconv.Atoi(mm[4])
		return incident.MPSEvent{GPUUUID: mm[3], PID: pid, Namespace: mm[2], Evicted: true, RequesterPID: req, RequesterNamespace: mm[5],
			Detail: "pid " + mm[1] + " " + strings.TrimSpace(mm[6]) + "; the requester was pid " + mm[4], Time: now}, true
	}
	if mm := faultLine.FindStringSubmatch(line); mm != nil {
		pid, _ := strconv.Atoi(mm[2])
		*fault = &faulter{gpu: mm[1], pid: pid, cgroup: mm[3]}
		return incident.MPSEvent{}, false
	}
	if mm := refusedLine.FindStringSubmatch(line); mm != nil {
		pid, _ := strconv.Atoi(mm[1])
		ev := incident.MPSEvent{GPUUUID: mm[3], PID: pid, Namespace: mm[2], Refused: true, Detail: "pid " + mm[1] + ": " + strings.TrimSpace(mm[4]), Time: now}
		if l := lingeringClient.FindStringSubmatch(mm[4]); l != nil {
			ev.RequesterPID, _ = strconv.Atoi(l[1])
			ev.RequesterNamespace = l[2]
		}
		return ev, true
	}
	mm := terminatedLine.FindStringSubmatch(line)
	if mm == nil {
		return incident.MPSEvent{}, false
	}
	why := strings.TrimSpace(mm[5])
	for _, own := range ownTerminations {
		if strings.HasPrefix(why, own) {
			return incident.MPSEvent{}, false
		}
	}
	pid, _ := strconv.Atoi(mm[1])
	ev := incident.MPSEvent{GPUUUID: mm[3], PID: pid, Namespace: mm[2], Detail: "pid " + mm[1] + " on MPS route " + mm[4] + ": " + why, Time: now}
	if f := *fault; f != nil && f.gpu == ev.GPUUUID {
		ev.RequesterPID, ev.RequesterNamespace = f.pid, f.cgroup
	}
	return ev, true
}

// deliver resolves the event's cgroups to claims and reports it when the
// victim is a container of a claim of the daemon key names.
func (m *Manager) deliver(ctx context.Context, key string, ev incident.MPSEvent) {
	victim, rec, ok := m.claimOfCgroup(key, ev.Namespace)
	if !ok {
		klog.FromContext(ctx).V(2).Info("An MPS client terminated that is no container of a known claim", "gpu", ev.GPUUUID, "cgroup", ev.Namespace, "pid", ev.PID)
		return
	}
	cgroup := ev.Namespace
	ev.ClaimUID, ev.Namespace = victim, ""
	ev.Container = incident.Container{Namespace: rec.Namespace, Pod: rec.Pod, Container: rec.Container}
	if req, _, ok := m.claimOfCgroup(key, ev.RequesterNamespace); ok {
		ev.RequesterClaimUID = req
	}
	ev.RequesterNamespace = ""
	klog.FromContext(ctx).Info("MPS ended or refused a client", "claimUID", ev.ClaimUID, "pod", klog.KRef(rec.Namespace, rec.Pod),
		"gpu", ev.GPUUUID, "cgroup", cgroup, "evicted", ev.Evicted, "refused", ev.Refused, "requesterClaimUID", ev.RequesterClaimUID)
	m.report(ev)
}

// claimOfCgroup finds the claim (among the users of the daemon key names:
// a GPU's UUID, or mpslayout.NodeServerKey) and the hook's
// record of the container whose cgroup this is: its last element is the
// container ID in cgroupfs (".../<id>") and systemd
// (".../cri-containerd-<id>.scope") spellings.
func (m *Manager) claimOfCgroup(key, cgroup string) (types.UID, record.Record, bool) {
	if cgroup == "" || cgroup == "-" {
		return "", record.Record{}, false
	}
	id := filepath.Base(cgroup)
	for _, p := range []string{"cri-containerd-", "crio-", "docker-"} {
		id = strings.TrimPrefix(id, p)
	}
	id = strings.TrimSuffix(id, ".scope")
	matches, _ := filepath.Glob(record.Path(m.cfg.RecordDir, "*", id))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, path := range matches {
		uid := types.UID(filepath.Base(filepath.Dir(path)))
		if _, user := m.users[key][uid]; !user {
			continue
		}
		var rec record.Record
		if raw, err := os.ReadFile(path); err == nil {
			_ = json.Unmarshal(raw, &rec) // a record without names still names the claim
		}
		return uid, rec, true
	}
	return "", record.Record{}, false
}
