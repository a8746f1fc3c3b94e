package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// v3State is what the double's MPS v3 daemon keeps: the servers its TOML
// config defined and the namespaces created since, each with its options
// as given, so tests read back exactly what the template asked for.
type v3State struct {
	servers    []string
	devices    map[string]string
	namespaces map[string]string // "<server>/<namespace>" → options
}

var (
	tomlServer = regexp.MustCompile(`^\[servers\.([a-z0-9_]+)\]$`)
	tomlKey    = regexp.MustCompile(`^([a-z_]+)\s*=\s*"?([^"]*)"?$`)
	// NVIDIA, mpsv3-configuration-file: lowercase letters, digits and '_',
	// at most 64 characters.
	mpsName = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
)

// load reads the subset of the TOML config the template writes, and
// refuses what the real daemon refuses: keys a server section does not
// accept, and a config without schema_version.
func (s *v3State) load(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("reading MPS config: %w", err)
	}
	s.devices = map[string]string{}
	server, schema := "", false
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch m := tomlServer.FindStringSubmatch(line); {
		case line == "":
		case m != nil:
			server = m[1]
			s.servers = append(s.servers, server)
		default:
			kv := tomlKey.FindStringSubmatch(line)
			if kv == nil {
				return fmt.Errorf("config %s: cannot parse %q", path, line)
			}
			switch {
			case server == "" && kv[1] == "schema_version":
				schema = kv[2] == "1.0"
			case server != "" && kv[1] == "allowed_devices":
				s.devices[server] = kv[2]
			default:
				return fmt.Errorf("config %s: configuration error: unknown key %q", path, kv[1])
			}
		}
	}
	if !schema {
		return fmt.Errorf("config %s: schema_version \"1.0\" is required", path)
	}
	logLine("config: servers=%s devices=%v", strings.Join(s.servers, ","), s.devices)
	return nil
}

// handle answers one module-verb command.
func (s *v3State) handle(f []string) string {
	switch {
	case len(f) >= 2 && f[0] == "server" && f[1] == "list":
		return strings.Join(s.servers, "\n")
	case len(f) >= 4 && f[0] == "namespace":
		server, ns := f[2], f[3]
		if !s.hasServer(server) {
			return "ERROR: no server " + server
		}
		if !mpsName.MatchString(ns) {
			return "ERROR: invalid namespace name " + ns
		}
		key := server + "/" + ns
		dir := filepath.Join(os.Getenv("CUDA_MPS_PIPE_DIRECTORY"), server, ns)
		switch f[1] {
		case "create":
			if _, ok := s.namespaces[key]; ok {
				return "ERROR: namespace exists " + key
			}
			s.namespaces[key] = strings.Join(f[4:], " ")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "ERROR: " + err.Error()
			}
			_ = os.WriteFile(filepath.Join(dir, "control"), nil, 0o600)
		case "set":
			if _, ok := s.namespaces[key]; !ok {
				return "ERROR: no namespace " + key
			}
			s.namespaces[key] = strings.Join(f[4:], " ")
		case "delete":
			if _, ok := s.namespaces[key]; !ok {
				return "ERROR: no namespace " + key
			}
			delete(s.namespaces, key)
			_ = os.RemoveAll(dir)
		default:
			return "ERROR: unknown verb " + f[1]
		}
		return ""
	}
	return "ERROR: unknown command " + strings.Join(f, " ")
}

func (s *v3State) hasServer(name string) bool {
	for _, v := range s.servers {
		if v == name {
			return true
		}
	}
	return false
}
