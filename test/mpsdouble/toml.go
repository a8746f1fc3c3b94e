// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
)

var (
	tomlSection = regexp.MustCompile(`^\[([a-z0-9_.-]+)\]$`)
	tomlKey     = regexp.MustCompile(`^([a-z_]+)\s*=\s*(.+)$`)
)

// Keys NVIDIA's r615 configuration page allows in each section ("Any other
// key is a configuration error"). r620 adds keys (compute_policy,
// timeslice_pct, cgroup, cgroup_depth, force_polling, ...); the double is
// an r615 daemon and refuses them, as r615 does.
var (
	serverKeys    = []string{"allowed_devices", "pinned_memory_limit", "active_thread_percentage", "client_priority", "uid", "locality_domains"}
	namespaceKeys = []string{"pinned_memory_limit", "active_thread_percentage", "client_priority"}
	memacctKeys   = []string{"enabled", "audit_log"}
	ctxShareKeys  = []string{"enabled", "default_socket"}
)

// load applies a -a config at start-up.
func (s *v3State) load(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading MPS config: %w", err)
	}
	section, schema := "", false
	type pending struct{ server, ns, key, value string }
	var settings []pending
	var servers []string
	for n, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		where := fmt.Sprintf("config %s line %d", path, n+1)
		if m := tomlSection.FindStringSubmatch(line); m != nil {
			section = m[1]
			parts := strings.Split(section, ".")
			switch {
			case section == "features.memacct" || section == "features.context-share":
			case len(parts) == 2 && parts[0] == "servers" && mpsName.MatchString(parts[1]):
				servers = append(servers, parts[1])
			case len(parts) == 4 && parts[0] == "servers" && parts[2] == "namespaces" && mpsName.MatchString(parts[3]):
			default:
				return fmt.Errorf("%s: configuration error: unknown section [%s]", where, section)
			}
			continue
		}
		kv := tomlKey.FindStringSubmatch(line)
		if kv == nil {
			return fmt.Errorf("%s: cannot parse %q", where, line)
		}
		key, value := kv[1], strings.Trim(kv[2], `"`)
		parts := strings.Split(section, ".")
		var allowed []string
		switch {
		case section == "":
			allowed = []string{"schema_version"}
			schema = schema || value == "1.0"
		case section == "features.memacct":
			allowed = memacctKeys
		case section == "features.context-share":
			allowed = ctxShareKeys
		case len(parts) == 2:
			allowed = serverKeys
		default:
			allowed = namespaceKeys
		}
		if !slices.Contains(allowed, key) {
			return fmt.Errorf("%s: configuration error: unknown key %q in [%s]", where, key, section)
		}
		switch section {
		case "features.memacct":
			if key == "enabled" {
				s.memacct = value == "true"
			} else {
				s.audit = value == "true"
			}
		case "features.context-share":
			if key == "enabled" {
				s.contextShare = value == "true"
			} else {
				if value != "on" && value != "off" {
					return fmt.Errorf("%s: default_socket %q is not on or off", where, value)
				}
				s.defaultSocketShared = value == "on"
			}
		}
		if len(parts) >= 2 && parts[0] == "servers" {
			p := pending{server: parts[1], key: key, value: value}
			if len(parts) == 4 {
				p.ns = parts[3]
			}
			settings = append(settings, p)
		}
	}
	if !schema {
		return fmt.Errorf("config %s: schema_version \"1.0\" is required", path)
	}
	for _, name := range servers {
		devices := ""
		for _, p := range settings {
			if p.server == name && p.ns == "" && p.key == "allowed_devices" {
				devices = p.value
			}
		}
		for _, d := range strings.Split(devices, ",") {
			if d != "" && s.ledger.capacity[d] == 0 {
				// NVIDIA (Dynamo guide): the server exits with "no
				// CUDA-capable device is detected".
				return fmt.Errorf("config %s: server %s: no CUDA-capable device %s is detected", path, name, d)
			}
		}
		if _, err := s.addServer(name, "", devices, false); err != nil {
			return err
		}
	}
	for _, p := range settings {
		srv := s.servers[p.server]
		if srv == nil {
			return fmt.Errorf("config %s: [servers.%s.namespaces.%s] without [servers.%s]", path, p.server, p.ns, p.server)
		}
		if p.key == "allowed_devices" || p.key == "uid" || p.key == "locality_domains" {
			continue
		}
		nsName := p.ns
		if nsName == "" {
			nsName = "default"
		}
		ns := srv.namespaces[nsName]
		if ns == nil {
			if err := s.listen(s.nsDir(srv.name, nsName)); err != nil {
				return err
			}
			ns = &namespace{name: nsName}
			srv.namespaces[nsName] = ns
		}
		opt := map[string]string{strings.ReplaceAll(p.key, "_", "-"): p.value}
		if err := checkValue(strings.ReplaceAll(p.key, "_", "-"), p.value); err != nil {
			return fmt.Errorf("config %s: %w", path, err)
		}
		s.setLimits(ns, opt)
	}
	logLine("config: servers=%s devices=%s memacct=%t context-share=%t default_socket=%s",
		strings.Join(servers, ","), s.ledger.allDevices(), s.memacct, s.contextShare, map[bool]string{true: "on", false: "off"}[s.defaultSocketShared])
	return nil
}
