// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// The MPS v3 command line as NVIDIA documents it (MPS guide, "MPS v3
// Interface", https://docs.nvidia.com/deploy/mps/latest/mpsv3-interface.html;
// docs/design/nvidia/mps.md, "MPS v3: what gpufrac relies on"):
//
//	nvidia-cuda-mps-control [-p 3] <module> <verb> [positional ...] [--key=value | key=value ...] [--flag ...]
//
// Up to three positionals; options as --key=value or key=value; the only
// valueless flags are --force and --all. Everything the double accepts is
// in the table below, and nothing else: a command line NVIDIA's CLI would
// not take fails here too, with an error message of the double's own (NVIDIA
// documents no exit codes or messages).

// Invocation is one parsed command line.
type Invocation struct {
	// Top-level options.
	Daemon, Foreground, Multiuser, Quit, Version, Help bool
	Protocol                                           int // 0: not given
	Apply                                              string
	// The module-verb command, if any.
	Module, Verb string
	Args         []string
	Options      map[string]string // key without dashes → value
	Flags        map[string]bool
}

// verbSpec is what one module verb takes.
type verbSpec struct {
	// pos names the positionals; those after minPos are optional.
	pos    []string
	minPos int
	// opts are the --key=value options the verb takes; required the ones
	// it must have; oneOf, when set, means at least one of these is given.
	opts     []string
	required []string
	oneOf    []string
	flags    []string
}

var grammar = map[string]map[string]verbSpec{
	"server": {
		// "either <name> or --uid is required"
		"create": {pos: []string{"name"}, minPos: 0, opts: []string{"uid", "allowed-devices", "locality-domains"}},
		"delete": {pos: []string{"name"}, minPos: 1, flags: []string{"force"}},
		"list":   {pos: []string{"name"}, minPos: 0, opts: []string{"format"}},
		"set": {pos: []string{"name"}, minPos: 1,
			opts:  []string{"uid", "pinned-memory-limit", "active-thread-percentage", "locality-domains", "client-priority"},
			oneOf: []string{"uid", "pinned-memory-limit", "active-thread-percentage", "locality-domains", "client-priority"}},
		"get": {pos: []string{"name", "field"}, minPos: 2},
	},
	"namespace": {
		"create": {pos: []string{"name"}, minPos: 1, opts: []string{"server"}, required: []string{"server"}},
		"delete": {pos: []string{"name"}, minPos: 1, opts: []string{"server"}, required: []string{"server"}, flags: []string{"force"}},
		"list":   {pos: []string{"name"}, minPos: 0, opts: []string{"server", "format"}},
		"set": {pos: []string{"name"}, minPos: 1,
			opts:     []string{"server", "pinned-memory-limit", "active-thread-percentage", "client-priority"},
			required: []string{"server"},
			oneOf:    []string{"pinned-memory-limit", "active-thread-percentage", "client-priority"}},
		// Here the server is the second positional, not an option.
		"get": {pos: []string{"name", "server", "field"}, minPos: 3},
	},
	"client": {
		"list":      {opts: []string{"server", "format"}, flags: []string{"all"}},
		"get":       {pos: []string{"pid", "field"}, minPos: 2},
		"terminate": {pos: []string{"pid"}, minPos: 1},
	},
	"device": {
		"list": {opts: []string{"server", "format"}},
	},
	"sm-partition": {
		"create": {pos: []string{"name"}, minPos: 1, opts: []string{"server", "device", "chunks", "include-remainder"},
			required: []string{"server", "device", "chunks"}},
	},
	"feature": {
		"enable":   {pos: []string{"feature"}, minPos: 1},
		"disable":  {pos: []string{"feature"}, minPos: 1},
		"describe": {pos: []string{"feature"}, minPos: 0, opts: []string{"format"}},
	},
	"memacct": {
		"set":      {opts: []string{"audit_log"}, oneOf: []string{"audit_log"}},
		"describe": {},
	},
}

var (
	// NVIDIA: server and namespace names are lowercase letters, digits and
	// '_', at most 64 characters.
	mpsName     = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
	memoryValue = regexp.MustCompile(`^[0-9]+[KMG]$`)
	formatValue = regexp.MustCompile(`^(table|csv)(,noheader)?$`)
	serverField = []string{"name", "uid", "pid", "status", "pipe-directory", "allowed-devices"}
	nsField     = []string{"name", "server", "server-status", "pipe-directory", "pinned-memory-limit", "active-thread-percentage", "client-priority"}
	clientField = []string{"pid", "server", "device", "pci-id", "linux-ns", "maws-ns", "cmd"}
	features    = []string{"memacct", "context-share"}
)

// Parse reads a command line (without the program name).
func Parse(args []string) (*Invocation, error) {
	inv := &Invocation{Options: map[string]string{}, Flags: map[string]bool{}}
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		switch a := args[i]; a {
		case "-h", "--help":
			inv.Help = true
		case "-d", "--daemon":
			inv.Daemon = true
		case "-f", "--foreground":
			inv.Foreground = true
		case "-m", "--multiuser":
			inv.Multiuser = true
		case "-q", "--quit":
			inv.Quit = true
		case "-v", "--version":
			inv.Version = true
		case "-a", "--apply", "-p", "--protocol":
			if i+1 >= len(args) {
				return nil, fmt.Errorf("option %s needs a value", a)
			}
			i++
			if a == "-a" || a == "--apply" {
				inv.Apply = args[i]
				continue
			}
			p, err := strconv.Atoi(args[i])
			if err != nil || (p != 2 && p != 3) {
				return nil, fmt.Errorf("option %s: protocol %q is not 2 or 3", a, args[i])
			}
			inv.Protocol = p
		default:
			return nil, fmt.Errorf("unknown option %s", a)
		}
	}
	if inv.Daemon && inv.Foreground {
		return nil, fmt.Errorf("-d and -f exclude each other")
	}
	if inv.Apply != "" && !inv.Daemon && !inv.Foreground {
		return nil, fmt.Errorf("-a applies a configuration at daemon start-up; it needs -d or -f")
	}
	rest := args[i:]
	if len(rest) == 0 {
		return inv, nil
	}
	if inv.Daemon || inv.Foreground || inv.Quit {
		return nil, fmt.Errorf("a command (%s) cannot be combined with starting or stopping the daemon", strings.Join(rest, " "))
	}
	inv.Module = rest[0]
	verbs, ok := grammar[inv.Module]
	if !ok {
		return nil, fmt.Errorf("unknown module %q (modules: server namespace client device sm-partition feature memacct context-share)", inv.Module)
	}
	if len(rest) == 1 {
		return nil, fmt.Errorf("%s: a verb is required (see %q)", inv.Module, inv.Module+" help")
	}
	inv.Verb = rest[1]
	if inv.Verb == "help" {
		inv.Help = true
		return inv, nil
	}
	spec, ok := verbs[inv.Verb]
	if !ok {
		return nil, fmt.Errorf("%s: unknown verb %q", inv.Module, inv.Verb)
	}
	for _, a := range rest[2:] {
		switch {
		case a == "help" && len(inv.Args) == 0 && len(inv.Options) == 0:
			inv.Help = true
			return inv, nil
		case a == "--force" || a == "--all":
			f := strings.TrimPrefix(a, "--")
			if !slices.Contains(spec.flags, f) {
				return nil, fmt.Errorf("%s %s: flag %s is not accepted", inv.Module, inv.Verb, a)
			}
			inv.Flags[f] = true
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--"):
			return nil, fmt.Errorf("%s %s: %q is not an option (options are --key=value)", inv.Module, inv.Verb, a)
		case strings.Contains(a, "="):
			k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
			if !slices.Contains(spec.opts, k) {
				return nil, fmt.Errorf("%s %s: option %q is not accepted (accepted: %s)", inv.Module, inv.Verb, k, strings.Join(spec.opts, ", "))
			}
			if _, dup := inv.Options[k]; dup {
				return nil, fmt.Errorf("%s %s: option %q given twice", inv.Module, inv.Verb, k)
			}
			if err := checkValue(k, v); err != nil {
				return nil, fmt.Errorf("%s %s: %w", inv.Module, inv.Verb, err)
			}
			inv.Options[k] = v
		case strings.HasPrefix(a, "-"):
			return nil, fmt.Errorf("%s %s: %q is not an option (options are --key=value)", inv.Module, inv.Verb, a)
		default:
			if len(inv.Args) == len(spec.pos) {
				return nil, fmt.Errorf("%s %s: unexpected argument %q (takes %s)", inv.Module, inv.Verb, a, usage(spec))
			}
			inv.Args = append(inv.Args, a)
		}
	}
	if len(inv.Args) < spec.minPos {
		return nil, fmt.Errorf("%s %s: missing <%s> (takes %s)", inv.Module, inv.Verb, spec.pos[len(inv.Args)], usage(spec))
	}
	for _, r := range spec.required {
		if _, ok := inv.Options[r]; !ok {
			return nil, fmt.Errorf("%s %s: --%s is required", inv.Module, inv.Verb, r)
		}
	}
	if len(spec.oneOf) > 0 && !slices.ContainsFunc(spec.oneOf, func(k string) bool { _, ok := inv.Options[k]; return ok }) {
		return nil, fmt.Errorf("%s %s: at least one of --%s is required", inv.Module, inv.Verb, strings.Join(spec.oneOf, ", --"))
	}
	if inv.Module == "server" && inv.Verb == "create" && len(inv.Args) == 0 && inv.Options["uid"] == "" {
		return nil, fmt.Errorf("server create: either <name> or --uid is required")
	}
	return inv, checkArgs(inv, spec)
}

func usage(s verbSpec) string {
	var parts []string
	for i, p := range s.pos {
		if i < s.minPos {
			parts = append(parts, "<"+p+">")
		} else {
			parts = append(parts, "[<"+p+">]")
		}
	}
	if len(parts) == 0 {
		return "no arguments"
	}
	return strings.Join(parts, " ")
}

func checkValue(k, v string) error {
	switch k {
	case "pinned-memory-limit":
		if !memoryValue.MatchString(v) {
			return fmt.Errorf("--pinned-memory-limit=%q: a memory value such as 4G, 512M or 1024K is required", v)
		}
	case "active-thread-percentage":
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 100 {
			return fmt.Errorf("--active-thread-percentage=%q: an integer from 1 to 100 is required", v)
		}
	case "client-priority":
		if v != "0" && v != "1" {
			return fmt.Errorf("--client-priority=%q: 0 (normal) or 1 (below normal) is required", v)
		}
	case "format":
		if !formatValue.MatchString(v) {
			return fmt.Errorf("--format=%q: table or csv, optionally with ,noheader, is required", v)
		}
	case "server":
		if !mpsName.MatchString(v) {
			return fmt.Errorf("--server=%q: names are lowercase letters, digits and '_', at most 64 characters", v)
		}
	case "uid", "chunks":
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return fmt.Errorf("--%s=%q: a non-negative integer is required", k, v)
		}
	case "locality-domains", "include-remainder", "audit_log":
		if v != "true" && v != "false" {
			return fmt.Errorf("%s=%q: true or false is required", k, v)
		}
	case "allowed-devices", "device":
		if v == "" {
			return fmt.Errorf("--%s: a value is required", k)
		}
	}
	return nil
}

func checkArgs(inv *Invocation, spec verbSpec) error {
	for i, a := range inv.Args {
		var err error
		switch spec.pos[i] {
		case "name":
			if !mpsName.MatchString(a) {
				err = fmt.Errorf("name %q: lowercase letters, digits and '_', at most 64 characters", a)
			}
		case "server":
			if !mpsName.MatchString(a) {
				err = fmt.Errorf("server %q: lowercase letters, digits and '_', at most 64 characters", a)
			}
		case "pid":
			if _, perr := strconv.ParseUint(a, 10, 32); perr != nil {
				err = fmt.Errorf("pid %q is not a process id", a)
			}
		case "feature":
			if !slices.Contains(features, a) {
				err = fmt.Errorf("feature %q: one of %s", a, strings.Join(features, ", "))
			}
		case "field":
			fields := map[string][]string{"server": serverField, "namespace": nsField, "client": clientField}[inv.Module]
			if !slices.Contains(fields, a) {
				err = fmt.Errorf("field %q: one of %s", a, strings.Join(fields, ", "))
			}
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", inv.Module, inv.Verb, err)
		}
	}
	return nil
}
