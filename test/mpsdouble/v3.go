// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// v3State is the double's MPS v3 control daemon: servers (from the TOML
// config, from `server create`, and the UID-routed uid_<uid> servers the
// main socket makes), their namespaces with their limits, the connected
// clients and a per-GPU memory ledger. The caller serialises access.
type v3State struct {
	pipeDir string
	servers map[string]*server
	order   []string
	clients map[clientKey]*client // by pid and device
	ledger  *ledger
	// Features, as [features.*] in the config set them (NVIDIA: both on
	// by default).
	memacct, contextShare bool
	defaultSocketShared   bool
	audit                 bool
	// clientListShape is MPSDOUBLE_CLIENT_LIST: "" prints NVIDIA's
	// documented client list row, clientListObserved615 the observed one.
	clientListShape string
	// faulted: per device, the clients a fatal GPU exception ended; until
	// they have all exited the server takes no new client there (fault).
	faulted map[string][]int
	// listen asks the I/O edge for a client socket at dir/control; stop
	// closes one.
	listen func(dir string) error
	stop   func(dir string)
}

type server struct {
	name, uid, devices string
	namespaces         map[string]*namespace // "default" always there
	auto               bool                  // uid_<uid>, made by the main socket
}

type namespace struct {
	name                 string
	pinned, atp, prio    string // "" = unset
	pinnedBytes, atpPerc int64
}

func newV3State(pipeDir string) *v3State {
	return &v3State{pipeDir: pipeDir, servers: map[string]*server{}, clients: map[clientKey]*client{},
		memacct: true, contextShare: true, defaultSocketShared: true}
}

func (s *v3State) addServer(name, uid, devices string, auto bool) (*server, error) {
	if _, ok := s.servers[name]; ok {
		return nil, fmt.Errorf("server %q already exists", name)
	}
	if devices == "" {
		devices = s.ledger.allDevices()
	}
	srv := &server{name: name, uid: uid, devices: devices, auto: auto, namespaces: map[string]*namespace{"default": {name: "default"}}}
	for _, dir := range []string{s.serverDir(name), s.nsDir(name, "default")} {
		if err := s.listen(dir); err != nil {
			return nil, err
		}
	}
	s.servers[name] = srv
	s.order = append(s.order, name)
	return srv, nil
}

func (s *v3State) serverDir(name string) string   { return filepath.Join(s.pipeDir, name) }
func (s *v3State) nsDir(server, ns string) string { return filepath.Join(s.pipeDir, server, ns) }

// reply is a command's stdout and whether it failed.
type reply struct {
	out string
	err error
}

func ok(out string) reply            { return reply{out: out} }
func fail(err error) reply           { return reply{err: err} }
func failf(f string, a ...any) reply { return reply{err: fmt.Errorf(f, a...)} }

// handle runs one parsed module-verb command.
func (s *v3State) handle(inv *Invocation) reply {
	o := inv.Options
	switch inv.Module + " " + inv.Verb {
	case "server list":
		return s.serverList(inv)
	case "server get":
		srv, r := s.server(inv.Args[0])
		if srv == nil {
			return r
		}
		return ok(s.serverRow(srv)[slices.Index(serverListColumns, inv.Args[1])])
	case "server create":
		name := firstOr(inv.Args, "uid_"+o["uid"])
		if _, err := s.addServer(name, o["uid"], o["allowed-devices"], false); err != nil {
			return fail(err)
		}
		return ok("")
	case "server set":
		srv, r := s.server(inv.Args[0])
		if srv == nil {
			return r
		}
		// NVIDIA: server-level limits are applied to its default namespace.
		return s.setLimits(srv.namespaces["default"], o)
	case "server delete":
		srv, r := s.server(inv.Args[0])
		if srv == nil {
			return r
		}
		if n := s.clientsOf(srv.name, ""); len(n) > 0 && !inv.Flags["force"] {
			return failf("server %q has %d active clients; use --force", srv.name, len(n))
		}
		for _, c := range s.clientsOf(srv.name, "") {
			s.terminate(c, "server deleted")
		}
		for ns := range srv.namespaces {
			s.stop(s.nsDir(srv.name, ns))
		}
		s.stop(s.serverDir(srv.name))
		delete(s.servers, srv.name)
		s.order = slices.DeleteFunc(s.order, func(n string) bool { return n == srv.name })
		return ok("")
	case "namespace create":
		srv, r := s.server(o["server"])
		if srv == nil {
			return r
		}
		name := inv.Args[0]
		if _, exists := srv.namespaces[name]; exists {
			return failf("namespace %q already exists on server %q", name, srv.name)
		}
		if err := s.listen(s.nsDir(srv.name, name)); err != nil {
			return fail(err)
		}
		srv.namespaces[name] = &namespace{name: name}
		return ok("")
	case "namespace set":
		ns, r := s.namespace(inv.Args[0], o["server"])
		if ns == nil {
			return r
		}
		return s.setLimits(ns, o)
	case "namespace delete":
		ns, r := s.namespace(inv.Args[0], o["server"])
		if ns == nil {
			return r
		}
		if ns.name == "default" {
			return failf("the default namespace cannot be deleted")
		}
		active := s.clientsOf(o["server"], ns.name)
		if len(active) > 0 && !inv.Flags["force"] {
			return failf("namespace %q of server %q has %d active clients; use --force", ns.name, o["server"], len(active))
		}
		for _, c := range active {
			s.terminate(c, "namespace deleted")
		}
		s.stop(s.nsDir(o["server"], ns.name))
		delete(s.servers[o["server"]].namespaces, ns.name)
		return ok("")
	case "namespace list":
		return s.namespaceList(inv)
	case "namespace get":
		ns, r := s.namespace(inv.Args[0], inv.Args[1])
		if ns == nil {
			return r
		}
		row := s.namespaceRow(s.servers[inv.Args[1]], ns)
		return ok(row[slices.Index(nsListColumns, inv.Args[2])])
	case "client list":
		return s.clientList(inv)
	case "client get":
		pid, _ := strconv.Atoi(inv.Args[0])
		c := s.liveClient(pid)
		if c == nil {
			return failf("no client with pid %d", pid)
		}
		return ok(c.field(inv.Args[1]))
	case "client terminate":
		pid, _ := strconv.Atoi(inv.Args[0])
		c := s.liveClient(pid)
		if c == nil {
			return failf("no client with pid %d", pid)
		}
		s.terminate(c, "client terminate")
		return ok("")
	case "feature describe":
		return ok(fmt.Sprintf("memacct %s\ncontext-share %s", onOff(s.memacct), onOff(s.contextShare)))
	case "memacct describe":
		return ok(fmt.Sprintf("memacct %s, audit_log=%t", onOff(s.memacct), s.audit))
	case "memacct set":
		s.audit = o["audit_log"] == "true"
		return ok("")
	}
	// Documented, parsed, but not modelled: a test that needs it must
	// extend the double rather than get a silent success.
	return failf("%s %s: not modelled by the MPS double", inv.Module, inv.Verb)
}

func firstOr(args []string, def string) string {
	if len(args) > 0 {
		return args[0]
	}
	return def
}

func onOff(b bool) string {
	if b {
		return "enabled"
	}
	return "disabled"
}

func (s *v3State) server(name string) (*server, reply) {
	srv := s.servers[name]
	if srv == nil {
		return nil, failf("server %q not found", name)
	}
	return srv, reply{}
}

func (s *v3State) namespace(name, server string) (*namespace, reply) {
	srv, r := s.server(server)
	if srv == nil {
		return nil, r
	}
	ns := srv.namespaces[name]
	if ns == nil {
		return nil, failf("namespace %q not found on server %q", name, server)
	}
	return ns, reply{}
}

func (s *v3State) setLimits(ns *namespace, o map[string]string) reply {
	if v, set := o["pinned-memory-limit"]; set {
		ns.pinned, ns.pinnedBytes = v, parseMemory(v)
	}
	if v, set := o["active-thread-percentage"]; set {
		ns.atp = v
		ns.atpPerc, _ = strconv.ParseInt(v, 10, 64)
	}
	if v, set := o["client-priority"]; set {
		ns.prio = v
	}
	return ok("")
}

// parseMemory reads a value the grammar accepted (digits and K, M or G).
func parseMemory(v string) int64 {
	n, _ := strconv.ParseInt(v[:len(v)-1], 10, 64)
	return n << map[byte]uint{'K': 10, 'M': 20, 'G': 30}[v[len(v)-1]]
}

func dash(v string) string {
	if v == "" {
		return "-"
	}
	return v
}

var serverListColumns = []string{"name", "uid", "pid", "status", "pipe-directory", "allowed-devices", "context-ids"}

func (s *v3State) serverRow(srv *server) []string {
	return []string{srv.name, dash(srv.uid), "-", "Ready", s.serverDir(srv.name), srv.devices, "-"}
}

// nsListColumns are namespace list's columns (NVIDIA, mpsv3-interface),
// which hold every field namespace get reads.
var nsListColumns = []string{"name", "server", "server-status", "pinned-memory-limit", "active-thread-percentage", "client-priority", "pipe-directory"}

func (s *v3State) namespaceRow(srv *server, ns *namespace) []string {
	return []string{ns.name, srv.name, "Ready", dash(ns.pinned), dash(ns.atp), dash(ns.prio), s.nsDir(srv.name, ns.name)}
}

func (s *v3State) serverList(inv *Invocation) reply {
	var rows [][]string
	for _, name := range s.order {
		if len(inv.Args) == 0 || inv.Args[0] == name {
			rows = append(rows, s.serverRow(s.servers[name]))
		}
	}
	if len(inv.Args) > 0 && len(rows) == 0 {
		return failf("server %q not found", inv.Args[0])
	}
	return ok(format(inv.Options["format"], serverListColumns, rows))
}

func (s *v3State) namespaceList(inv *Invocation) reply {
	var rows [][]string
	for _, name := range s.order {
		srv := s.servers[name]
		if o := inv.Options["server"]; o != "" && o != name {
			continue
		}
		nss := make([]string, 0, len(srv.namespaces))
		for n := range srv.namespaces {
			nss = append(nss, n)
		}
		slices.Sort(nss)
		for _, n := range nss {
			if len(inv.Args) == 0 || inv.Args[0] == n {
				rows = append(rows, s.namespaceRow(srv, srv.namespaces[n]))
			}
		}
	}
	if o := inv.Options["server"]; o != "" && s.servers[o] == nil {
		return failf("server %q not found", o)
	}
	return ok(format(inv.Options["format"], nsListColumns, rows))
}

// clientList prints NVIDIA's documented row (mpsv3-interface, "Client":
// `51023,training,0,default,python train.py`): pid, server, the device's
// ordinal, the bare namespace name, the command. With
// MPSDOUBLE_CLIENT_LIST=observed-615 it prints instead the row KAI's
// operator recorded from an r615 driver (`3167082,srv,GPU-cc97...,srv/default
// (0),VLLM::EngineCore`): the device's UUID and `<server>/<namespace>
// (<context>)`. Both are what a real daemon may print; gpufrac's daemon
// script accepts either.
//
// A client of several devices is listed once per device (the double's
// choice: NVIDIA's row has one device column).
func (s *v3State) clientList(inv *Invocation) reply {
	var keys []clientKey
	for k, c := range s.clients {
		if c.terminated == "" && (inv.Options["server"] == "" || inv.Options["server"] == c.server) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b clientKey) int {
		if a.pid != b.pid {
			return a.pid - b.pid
		}
		return strings.Compare(a.device, b.device)
	})
	var rows [][]string
	for _, k := range keys {
		c, pid := s.clients[k], k.pid
		dev, ns := c.device, fmt.Sprintf("%s/%s (%d)", c.server, c.namespace, c.context)
		if s.clientListShape != clientListObserved615 {
			dev, ns = strconv.Itoa(slices.Index(strings.Split(s.servers[c.server].devices, ","), c.device)), c.namespace
		}
		rows = append(rows, []string{strconv.Itoa(pid), c.server, dev, ns, c.cmd})
	}
	return ok(format(inv.Options["format"], []string{"pid", "server", "device", "namespace", "cmd"}, rows))
}

// clientListObserved615 selects the client list row KAI observed on r615.
const clientListObserved615 = "observed-615"

// format renders rows as NVIDIA's table (the default) or csv, with or
// without the header. The table's column widths are the double's own.
func format(f string, header []string, rows [][]string) string {
	var lines []string
	csv := strings.HasPrefix(f, "csv")
	if !strings.HasSuffix(f, "noheader") {
		rows = append([][]string{header}, rows...)
	}
	for _, r := range rows {
		if csv {
			lines = append(lines, strings.Join(r, ","))
		} else {
			lines = append(lines, strings.Join(r, "  "))
		}
	}
	return strings.Join(lines, "\n")
}

// liveClient is a process's first record while it is a client.
func (s *v3State) liveClient(pid int) *client {
	if rs := s.recordsOf(pid); len(rs) > 0 && rs[0].terminated == "" {
		return rs[0]
	}
	return nil
}

func (s *v3State) clientsOf(server, ns string) []*client {
	var out []*client
	for _, c := range s.clients {
		if c.terminated == "" && c.server == server && (ns == "" || c.namespace == ns) {
			out = append(out, c)
		}
	}
	return out
}
