// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gpufrac/gpufrac/test/gpuwire"
)

const (
	unlimited         = int64(1) << 62
	contextOwnPerProc = -1
)

// client is one MPS client process, known by the pid its socket's peer
// credentials give (memacct identifies clients that way: NVIDIA's KAI
// operator found limits unenforced without hostPID, "failed to register
// client pid 0").
type client struct {
	pid, uid            int
	cgroup              string // from /proc/<pid>/cgroup, as memacct knows it
	server, namespace   string
	device, cmd         string
	context             int
	soft, hard, used    int64
	terminated, whyTerm string
}

func (c *client) field(f string) string {
	switch f {
	case "pid":
		return strconv.Itoa(c.pid)
	case "server":
		return c.server
	case "device":
		return c.device
	case "cmd":
		return c.cmd
	}
	return "-"
}

// ledger is the memory of each GPU the daemon serves, and who holds it.
type ledger struct {
	capacity map[string]int64
	order    []string
	// Counters NVIDIA says the daemon logs per device.
	requested, performed, noVictim map[string]int
}

// parseLedger reads "GPU-a=144384,GPU-b=81920" (MiB per GPU UUID).
func parseLedger(spec string) (*ledger, error) {
	l := &ledger{capacity: map[string]int64{}, requested: map[string]int{}, performed: map[string]int{}, noVictim: map[string]int{}}
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		uuid, mib, found := strings.Cut(f, "=")
		n, err := strconv.ParseInt(mib, 10, 64)
		if !found || err != nil || n <= 0 || !strings.HasPrefix(uuid, "GPU-") {
			return nil, fmt.Errorf("GPU memory %q: want GPU-<uuid>=<MiB>", f)
		}
		l.capacity[uuid] = n << 20
		l.order = append(l.order, uuid)
	}
	return l, nil
}

func (l *ledger) allDevices() string { return strings.Join(l.order, ",") }

// clientKey names one client process's use of one device. A client of a
// server over several GPUs (NVIDIA's multi-GPU configuration, contract
// M1/M2) may use more than one; memacct's soft and hard limits, the ledger
// and eviction are per device (the dmem limits are: one line per GPU), so
// each use is a record of its own, and the process is ended as a whole
// (terminate). How NVIDIA's server keeps a client of several devices is
// not documented: inferred, and test/gpu/run.sh multigpu_check checks it.
type clientKey struct {
	pid    int
	device string
}

// route is where a client lands: the socket it connected to decides
// (NVIDIA, mpsv3-namespaces "Namespace Routing").
type route struct{ server, namespace string }

// connect registers a client arriving on rt (server "" = the main socket,
// routed by UID to server uid_<uid>): one record per device it uses, in
// the order it listed them.
func (s *v3State) connect(pid, uid int, rt route, h gpuwire.Hello) ([]*client, error) {
	if rt.server == "" {
		rt = route{"uid_" + strconv.Itoa(uid), "default"}
		if s.servers[rt.server] == nil {
			if _, err := s.addServer(rt.server, strconv.Itoa(uid), "", true); err != nil {
				return nil, err
			}
		}
	}
	srv := s.servers[rt.server]
	if srv == nil || srv.namespaces[rt.namespace] == nil {
		return nil, fmt.Errorf("%s: no such server or namespace %s/%s", gpuwire.CUDANoDevice, rt.server, rt.namespace)
	}
	uses := h.Devices
	if len(uses) == 0 {
		uses = []gpuwire.HelloDevice{{Device: h.Device, SoftBytes: h.SoftBytes, HardBytes: h.HardBytes}}
	}
	devices := strings.Split(srv.devices, ",")
	if len(uses) == 1 && uses[0].Device == "" && len(devices) == 1 {
		uses[0].Device = devices[0]
	}
	if live := s.recordsOf(pid); len(live) > 0 && live[0].terminated == "" {
		return nil, fmt.Errorf("%s: pid %d is already a client", gpuwire.CUDANotPermitted, pid)
	}
	seen := map[string]bool{}
	for i, u := range uses {
		if err := s.admit(pid, srv, devices, u); err != nil {
			return nil, err
		}
		if seen[u.Device] {
			return nil, fmt.Errorf("%s: device %s listed twice", gpuwire.CUDAInvalidValue, u.Device)
		}
		seen[u.Device] = true
		if uses[i].HardBytes <= 0 {
			uses[i].HardBytes = unlimited
		}
	}
	s.forget(pid)
	out := make([]*client, len(uses))
	for i, u := range uses {
		c := &client{pid: pid, uid: uid, server: rt.server, namespace: rt.namespace, device: u.Device, cmd: h.Cmd,
			soft: u.SoftBytes, hard: u.HardBytes, cgroup: cgroupOf(pid)}
		// Context sharing: clients of a context-shared server share one
		// context per device; the default socket's UID servers do not when
		// default_socket is off (KAI's reading of the feature, inferred).
		c.context = contextOwnPerProc
		if s.contextShare && (!srv.auto || s.defaultSocketShared) {
			c.context = 0
		}
		s.clients[clientKey{pid, u.Device}] = c
		logLine("client connected: pid=%d uid=%d route=%s/%s device=%s soft=%dMiB hard=%dMiB context=%s",
			pid, uid, c.server, c.namespace, c.device, c.soft>>20, min(c.hard, unlimited)>>20, contextName(c.context))
		out[i] = c
	}
	return out, nil
}

// admit checks one device a connecting client asks for.
func (s *v3State) admit(pid int, srv *server, devices []string, u gpuwire.HelloDevice) error {
	if !slices.Contains(devices, u.Device) || s.ledger.capacity[u.Device] == 0 {
		// NVIDIA (Dynamo guide): a server without the device fails with
		// "no CUDA-capable device is detected".
		return fmt.Errorf("%s: server %s does not serve device %q", gpuwire.CUDANoDevice, srv.name, u.Device)
	}
	if lingering := s.lingering(u.Device); len(lingering) > 0 {
		// NVIDIA (error containment): the server waits for the clients
		// the fault reached to exit and rejects new client requests to
		// the device meanwhile (CUDA_ERROR_MPS_SERVER_NOT_READY).
		logLine("client refused: pid=%d cgroup=%s device=%s: server not ready: waiting for the clients a fatal GPU exception ended to exit: %s",
			pid, cgroupOf(pid), u.Device, strings.Join(lingering, ", "))
		return fmt.Errorf("%s: device %s waits for the clients a fatal GPU exception ended to exit", gpuwire.CUDAServerNotReady, u.Device)
	}
	if u.SoftBytes < 0 || (u.HardBytes > 0 && u.SoftBytes > u.HardBytes) {
		return fmt.Errorf("%s: soft limit %d above hard limit %d on %s", gpuwire.CUDAInvalidValue, u.SoftBytes, u.HardBytes, u.Device)
	}
	return nil
}

// recordsOf is a process's records, one per device it uses, sorted by
// device.
func (s *v3State) recordsOf(pid int) []*client {
	var out []*client
	for k, c := range s.clients {
		if k.pid == pid {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *client) int { return strings.Compare(a.device, b.device) })
	return out
}

// forget drops a process's records.
func (s *v3State) forget(pid int) {
	for k := range s.clients {
		if k.pid == pid {
			delete(s.clients, k)
		}
	}
}

func contextName(ctx int) string {
	if ctx == contextOwnPerProc {
		return "own"
	}
	return "shared"
}

// cgroupOf is the process's cgroup path (cgroup v2's one line, or the
// first hierarchy's path on v1); memacct compares limits per cgroup, so
// the double names its victims by cgroup (the log format is the double's:
// NVIDIA documents per-device counts only).
func cgroupOf(pid int) string {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "-"
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[2] != "/" && parts[2] != "" {
			return parts[2]
		}
	}
	return "-"
}

// hardOf is the client's ceiling: its cgroup's hard limit, further held by
// its namespace's pinned memory limit when one is set.
func (s *v3State) hardOf(c *client) int64 {
	h := c.hard
	if ns := s.servers[c.server].namespaces[c.namespace]; ns != nil && ns.pinnedBytes > 0 {
		h = min(h, ns.pinnedBytes)
	}
	return h
}

func (s *v3State) used(device string) int64 {
	var sum int64
	for _, c := range s.clients {
		if c.terminated == "" && c.device == device {
			sum += c.used
		}
	}
	return sum
}

// alloc is cuMemAlloc of n bytes by c, with memacct eviction as NVIDIA's
// memory-partitioning page documents it: a client still within its soft
// limit whose allocation does not fit makes the server terminate an
// over-soft client and retry; an over-soft requester gets out-of-memory;
// the server never evicts the requester itself.
func (s *v3State) alloc(c *client, n int64) string {
	if c.terminated != "" {
		return gpuwire.CUDATerminated
	}
	if n <= 0 {
		return gpuwire.CUDAInvalidValue
	}
	if c.used+n > s.hardOf(c) {
		logLine("alloc: pid=%d %dMiB refused: above its hard limit (%dMiB used, %dMiB hard)", c.pid, n>>20, c.used>>20, s.hardOf(c)>>20)
		return gpuwire.CUDAOutOfMemory
	}
	capacity := s.ledger.capacity[c.device]
	for s.used(c.device)+n > capacity {
		if !s.memacct || c.used+n > c.soft {
			logLine("alloc: pid=%d %dMiB refused: device %s full (%dMiB of %dMiB used) and the requester is above its soft limit",
				c.pid, n>>20, c.device, s.used(c.device)>>20, capacity>>20)
			return gpuwire.CUDAOutOfMemory
		}
		s.ledger.requested[c.device]++
		victim := s.victim(c)
		if victim == nil {
			s.ledger.noVictim[c.device]++
			logLine("memacct: device %s eviction requested by pid %d: no client above its soft limit (requested=%d performed=%d no-victim=%d)",
				c.device, c.pid, s.ledger.requested[c.device], s.ledger.performed[c.device], s.ledger.noVictim[c.device])
			return gpuwire.CUDAOutOfMemory
		}
		s.ledger.performed[c.device]++
		logLine("memacct: evicted client pid=%d cgroup=%s device=%s for pid %d cgroup=%s: used %dMiB, soft limit %dMiB",
			victim.pid, victim.cgroup, c.device, c.pid, c.cgroup, victim.used>>20, victim.soft>>20)
		s.terminate(victim, fmt.Sprintf("evicted: it used %dMiB above its soft limit of %dMiB on %s, and pid %d (%s/%s) within its soft limit needed the memory",
			(victim.used-victim.soft)>>20, victim.soft>>20, c.device, c.pid, c.server, c.namespace))
		logLine("memacct: device %s eviction requested=%d performed=%d no-victim=%d",
			c.device, s.ledger.requested[c.device], s.ledger.performed[c.device], s.ledger.noVictim[c.device])
	}
	c.used += n
	logLine("alloc: pid=%d %dMiB ok (%dMiB used by it, %dMiB of %dMiB on %s)", c.pid, n>>20, c.used>>20, s.used(c.device)>>20, capacity>>20, c.device)
	return gpuwire.CUDASuccess
}

// victim is the client furthest above its soft limit on c's device (NVIDIA
// does not document the choice; inferred), never c itself.
func (s *v3State) victim(c *client) *client {
	var best *client
	for _, o := range s.clients {
		if o == c || o.terminated != "" || o.device != c.device || o.used <= o.soft {
			continue
		}
		if best == nil || o.used-o.soft > best.used-best.soft || (o.used-o.soft == best.used-best.soft && o.pid < best.pid) {
			best = o
		}
	}
	return best
}

func (s *v3State) free(c *client, n int64) string {
	if c.terminated != "" {
		return gpuwire.CUDATerminated
	}
	if n <= 0 || n > c.used {
		return gpuwire.CUDAInvalidValue
	}
	c.used -= n
	return gpuwire.CUDASuccess
}

// terminate ends a client: its memory is released and its next call
// returns CUDA_ERROR_MPS_CLIENT_TERMINATED. The server ends the client
// process, not one device of it: a client of several devices loses all of
// them (inferred: NVIDIA documents termination per client; multigpu_check
// in test/gpu/run.sh checks it), each with its line.
func (s *v3State) terminate(c *client, why string) {
	for _, r := range s.recordsOf(c.pid) {
		if r.terminated != "" {
			continue
		}
		r.terminated, r.whyTerm, r.used = gpuwire.CUDATerminated, why, 0
		logLine("client terminated: pid=%d cgroup=%s device=%s route=%s/%s: %s", r.pid, r.cgroup, r.device, r.server, r.namespace, why)
	}
}

// fault is a fatal GPU exception raised by c (an illegal address, say).
// NVIDIA ("Memory Protection and Error Containment", Volta MPS): the
// exception is reported to every client sharing the faulting GPU, which
// must exit; clients of other GPUs go on. The double terminates them all,
// the faulting client first, each with a line naming the fault (the
// lines' format is the double's: NVIDIA documents none). A real server
// then refuses new clients on the GPU until the affected ones have
// exited (lingering).
func (s *v3State) fault(c *client) string {
	if c.terminated != "" {
		return gpuwire.CUDATerminated
	}
	logLine("server: fatal GPU exception on device=%s raised by pid=%d cgroup=%s", c.device, c.pid, c.cgroup)
	why := fmt.Sprintf("fatal GPU exception raised by pid %d on %s", c.pid, c.device)
	s.terminate(c, why)
	pids := make([]int, 0, len(s.clients))
	for k, o := range s.clients {
		if o != c && o.terminated == "" && o.device == c.device {
			pids = append(pids, k.pid)
		}
	}
	slices.Sort(pids)
	for _, pid := range pids {
		s.terminate(s.clients[clientKey{pid, c.device}], why)
	}
	if s.faulted == nil {
		s.faulted = map[string][]int{}
	}
	s.faulted[c.device] = append(append(s.faulted[c.device], c.pid), pids...)
	return gpuwire.CUDATerminated
}

// lingering names ("pid=… cgroup=…") the clients a fatal exception on
// device ended that have not exited yet; once all have, the device takes
// clients again.
func (s *v3State) lingering(device string) []string {
	var out []string
	for _, pid := range s.faulted[device] {
		if c := s.clients[clientKey{pid, device}]; c != nil && c.terminated != "" {
			out = append(out, fmt.Sprintf("pid=%d cgroup=%s", c.pid, c.cgroup))
		}
	}
	if len(out) == 0 {
		delete(s.faulted, device)
	}
	return out
}

// disconnect is the client process exiting: all its records go.
func (s *v3State) disconnect(cs []*client) {
	if len(cs) == 0 || s.clients[clientKey{cs[0].pid, cs[0].device}] != cs[0] {
		return
	}
	s.forget(cs[0].pid)
	logLine("client disconnected: pid=%d", cs[0].pid)
}
