// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The legacy (protocol 2) commands of the interactive shell, one per stdin
// line, as NVIDIA documents them (MPS guide, "Legacy MPS v2 interface",
// https://docs.nvidia.com/deploy/mps/mpsv2-interface.html;
// docs/design/nvidia/mps-legacy.md, "Commands of the interactive shell").
// Their arguments are checked as strictly as the v3 grammar checks its
// own (grammar.go): a line the real shell would not take fails here too.

// legacySpec is one command: its argument kinds, in order.
type legacySpec []string

var legacyGrammar = map[string]legacySpec{
	"get_server_list":                      {},
	"quit":                                 {},
	"get_default_active_thread_percentage": {},
	"set_default_active_thread_percentage": {"percentage"},
	"get_default_device_pinned_mem_limit":  {"device"},
	"set_default_device_pinned_mem_limit":  {"device", "limit"},
	"set_device_pinned_mem_limit":          {"pid", "device", "limit"},
	"set_active_thread_percentage":         {"pid", "percentage"},
}

var (
	// NVIDIA: "an integer followed by a qualifier, either 'G' or 'M'"
	// (the v3 grammar adds K; the legacy page does not).
	legacyLimit = regexp.MustCompile(`^[0-9]+[GM]$`)
	// NVIDIA: "a device UUID string or an integer ordinal". Which GPU it
	// names is not checked (NVIDIA: a limit for an invalid device is
	// ignored when the server starts), only its form.
	legacyDevice = regexp.MustCompile(`^([0-9]+|GPU-[0-9A-Za-z-]+)$`)
)

// legacyCommand is one parsed legacy line.
type legacyCommand struct {
	name string
	args []string
}

// parseLegacy checks a legacy line against legacyGrammar.
func parseLegacy(line string) (legacyCommand, error) {
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return legacyCommand{}, fmt.Errorf("empty command")
	}
	spec, ok := legacyGrammar[fields[0]]
	if !ok {
		return legacyCommand{}, fmt.Errorf("unknown command %q", fields[0])
	}
	cmd := legacyCommand{name: fields[0], args: fields[1:]}
	if len(cmd.args) != len(spec) {
		return legacyCommand{}, fmt.Errorf("%s: takes %d arguments (%s), got %d", cmd.name, len(spec), strings.Join(spec, " "), len(cmd.args))
	}
	for i, kind := range spec {
		if err := checkLegacyArg(kind, cmd.args[i]); err != nil {
			return legacyCommand{}, fmt.Errorf("%s: %w", cmd.name, err)
		}
	}
	return cmd, nil
}

func checkLegacyArg(kind, v string) error {
	switch kind {
	case "percentage":
		// The same range as v3's --active-thread-percentage.
		return checkValue("active-thread-percentage", v)
	case "limit":
		if !legacyLimit.MatchString(v) {
			return fmt.Errorf("limit %q: an integer followed by G or M is required", v)
		}
	case "device":
		if !legacyDevice.MatchString(v) {
			return fmt.Errorf("device %q: a GPU UUID or an integer ordinal is required", v)
		}
	case "pid":
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return fmt.Errorf("pid %q is not a process id", v)
		}
	}
	return nil
}
