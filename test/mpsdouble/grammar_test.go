// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// Every accepted line is an example from NVIDIA's MPS v3 pages (interface,
// namespaces, quick start) or an argv NVIDIA-authored code pins (KAI's
// mpsctl test, marked); every refused line is something the real CLI's
// documented grammar does not allow, the old gpufrac argument order first.
func TestGrammarAcceptsNVIDIAsExamples(t *testing.T) {
	for _, tc := range []struct {
		line          string
		module, verb  string
		args          []string
		options       map[string]string
		flags         []string
		daemon, quit  bool
		protocol      int
		apply         string
		foreground    bool
		multiuser     bool
		help, version bool
	}{
		// Quick start / interface: starting and stopping.
		{line: "-d -p 3", daemon: true, protocol: 3},
		{line: "-d -p 3 -a cfg.toml", daemon: true, protocol: 3, apply: "cfg.toml"},
		{line: "-f -p 3", foreground: true, protocol: 3},
		{line: "--foreground --protocol 3 --multiuser --apply /etc/nvidia-mps/mps-control.toml", foreground: true, protocol: 3, multiuser: true, apply: "/etc/nvidia-mps/mps-control.toml"},
		{line: "-p 3 -m -f -a /etc/nvidia-mps/mps-control.toml", foreground: true, protocol: 3, multiuser: true, apply: "/etc/nvidia-mps/mps-control.toml"}, // KAI
		{line: "-q", quit: true},
		{line: "-v", version: true},
		// Namespaces page examples.
		{line: "namespace create high_priority --server=training", module: "namespace", verb: "create", args: []string{"high_priority"}, options: map[string]string{"server": "training"}},
		{line: "namespace set high_priority --server=training --pinned-memory-limit=4G", module: "namespace", verb: "set", args: []string{"high_priority"}, options: map[string]string{"server": "training", "pinned-memory-limit": "4G"}},
		{line: "namespace get high_priority training pinned-memory-limit", module: "namespace", verb: "get", args: []string{"high_priority", "training", "pinned-memory-limit"}},
		{line: "namespace list high_priority --server=training --format=csv,noheader", module: "namespace", verb: "list", args: []string{"high_priority"}, options: map[string]string{"server": "training", "format": "csv,noheader"}},
		{line: "namespace delete high_priority --server=training --force", module: "namespace", verb: "delete", args: []string{"high_priority"}, options: map[string]string{"server": "training"}, flags: []string{"force"}},
		// KAI's pinned argv (NVIDIA-authored code).
		{line: "-p 3 namespace create kai_abc_0011 --server=shared", protocol: 3, module: "namespace", verb: "create", args: []string{"kai_abc_0011"}, options: map[string]string{"server": "shared"}},
		{line: "-p 3 namespace set kai_abc_0011 --server=shared --active-thread-percentage=25", protocol: 3, module: "namespace", verb: "set", args: []string{"kai_abc_0011"}, options: map[string]string{"server": "shared", "active-thread-percentage": "25"}},
		{line: "-p 3 namespace delete kai_abc_0011 --server=shared", protocol: 3, module: "namespace", verb: "delete", args: []string{"kai_abc_0011"}, options: map[string]string{"server": "shared"}},
		{line: "-p 3 namespace get kai_abc_0011 shared pipe-directory", protocol: 3, module: "namespace", verb: "get", args: []string{"kai_abc_0011", "shared", "pipe-directory"}},
		{line: "-p 3 namespace list --server=shared", protocol: 3, module: "namespace", verb: "list", options: map[string]string{"server": "shared"}},
		// Interface page: server, client, feature, memacct.
		{line: "server create training --allowed-devices=GPU-abcd-1234", module: "server", verb: "create", args: []string{"training"}, options: map[string]string{"allowed-devices": "GPU-abcd-1234"}},
		{line: "server create --uid=0", module: "server", verb: "create", options: map[string]string{"uid": "0"}},
		{line: "server list --format=csv,noheader", module: "server", verb: "list", options: map[string]string{"format": "csv,noheader"}},
		{line: "server set training --pinned-memory-limit=10G --active-thread-percentage=50", module: "server", verb: "set", args: []string{"training"}, options: map[string]string{"pinned-memory-limit": "10G", "active-thread-percentage": "50"}},
		{line: "server get training pipe-directory", module: "server", verb: "get", args: []string{"training", "pipe-directory"}},
		{line: "server delete training --force", module: "server", verb: "delete", args: []string{"training"}, flags: []string{"force"}},
		{line: "client list --server=training --all --format=csv,noheader", module: "client", verb: "list", options: map[string]string{"server": "training", "format": "csv,noheader"}, flags: []string{"all"}},
		{line: "client terminate 48201", module: "client", verb: "terminate", args: []string{"48201"}},
		{line: "client get 48201 cmd", module: "client", verb: "get", args: []string{"48201", "cmd"}},
		{line: "sm-partition create half --server=training --device=GPU-abcd-1234 --chunks=4", module: "sm-partition", verb: "create", args: []string{"half"}, options: map[string]string{"server": "training", "device": "GPU-abcd-1234", "chunks": "4"}},
		{line: "feature describe", module: "feature", verb: "describe"},
		{line: "feature disable context-share", module: "feature", verb: "disable", args: []string{"context-share"}},
		{line: "memacct set audit_log=true", module: "memacct", verb: "set", options: map[string]string{"audit_log": "true"}},
		{line: "namespace help", module: "namespace", verb: "help", help: true},
		{line: "namespace create help", module: "namespace", verb: "create", help: true},
	} {
		t.Run(tc.line, func(t *testing.T) {
			inv, err := Parse(strings.Fields(tc.line))
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.options == nil {
				tc.options = map[string]string{}
			}
			var flags []string
			for f := range inv.Flags {
				flags = append(flags, f)
			}
			if inv.Module != tc.module || inv.Verb != tc.verb || !slices.Equal(inv.Args, tc.args) ||
				!maps.Equal(inv.Options, tc.options) || !slices.Equal(flags, tc.flags) ||
				inv.Daemon != tc.daemon || inv.Foreground != tc.foreground || inv.Quit != tc.quit ||
				inv.Protocol != tc.protocol || inv.Apply != tc.apply || inv.Multiuser != tc.multiuser ||
				inv.Help != tc.help || inv.Version != tc.version {
				t.Errorf("parsed as %+v", inv)
			}
		})
	}
}

func TestGrammarRefusesWhatNVIDIADoesNotDocument(t *testing.T) {
	for _, tc := range []struct{ line, why string }{
		// gpufrac's old argument order: server first, limits on create.
		{"namespace create gpufrac c_a --pinned-memory-limit=24576M --active-thread-percentage=100", `unexpected argument "c_a"`},
		{"namespace create c_a --server=gpufrac --pinned-memory-limit=24576M", `option "pinned-memory-limit" is not accepted`},
		{"namespace create gpufrac c_a", `unexpected argument "c_a"`},
		{"namespace set gpufrac c_a --pinned-memory-limit=24576M --active-thread-percentage=100", `unexpected argument "c_a"`},
		{"namespace delete gpufrac c_a", `unexpected argument "c_a"`},
		{"namespace create c_a", "--server is required"},
		{"namespace set c_a --server=gpufrac", "at least one of"},
		{"namespace get c_a --server=gpufrac pipe-directory", `option "server" is not accepted`},
		{"namespace get c_a gpufrac", "missing <field>"},
		{"namespace get c_a gpufrac pipe_directory", `field "pipe_directory"`},
		{"namespace create c_a --server=gpufrac --force", "flag --force is not accepted"},
		{"namespace set c_a --server=gpufrac --active-thread-percentage=0", "from 1 to 100"},
		{"namespace set c_a --server=gpufrac --active-thread-percentage=101", "from 1 to 100"},
		{"namespace set c_a --server=gpufrac --pinned-memory-limit=4GB", "memory value"},
		{"namespace set c_a --server=gpufrac --pinned-memory-limit=4096", "memory value"},
		{"namespace create C_a --server=gpufrac", "lowercase"},
		{"namespace create c-a --server=gpufrac", "lowercase"},
		{"namespace create " + strings.Repeat("a", 65) + " --server=gpufrac", "at most 64"},
		{"namespace list --server=gpufrac --format=json", "table or csv"},
		{"namespace set c_a --server=gpufrac --pinned-memory-limit=1G --pinned-memory-limit=2G", "given twice"},
		{"namespace", "a verb is required"},
		{"namespace rename c_a --server=gpufrac", `unknown verb "rename"`},
		{"get_server_list", `unknown module`},
		{"server set gpufrac", "at least one of"},
		{"server create", "either <name> or --uid"},
		{"client terminate abc", "not a process id"},
		{"feature enable sm-sharing", `feature "sm-sharing"`},
		{"-p 4 server list", "not 2 or 3"},
		{"-x", "unknown option"},
		{"-a cfg.toml", "needs -d or -f"},
		{"-d -f", "exclude each other"},
		{"-f -p 3 server list", "cannot be combined"},
		{"server list -format=csv", "is not an option"},
	} {
		t.Run(tc.line, func(t *testing.T) {
			_, err := Parse(strings.Fields(tc.line))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Errorf("error %q does not say %q", err, tc.why)
			}
		})
	}
}
