// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
)

// endless is stdin that never ends: prefix, then fill forever.
type endless struct {
	prefix string
	fill   byte
}

func (e *endless) Read(p []byte) (int, error) {
	n := copy(p, e.prefix)
	e.prefix = e.prefix[n:]
	for i := n; i < len(p); i++ {
		p[i] = e.fill
	}
	return len(p), nil
}

// hostileCase is one malicious input to the whole hook (cdihook.Run, what
// cmd/gpufrac-cdi-hook runs) and its expected outcome.
type hostileCase struct {
	name  string
	stdin io.Reader
	// proc is /proc/42/cgroup; "" is a container's v2 cgroup.
	proc string
	// claim and recordDir are the --claim and --record-dir flags; recordDir
	// "" is a fresh directory (see setup).
	claim, recordDir string
	// setup prepares the host: base is a fresh directory holding the record
	// directory (base/records) and a directory a hostile input aims at
	// (base/outside).
	setup func(t *testing.T, base string)
	// twice gives the first GPU's --gpu a second time.
	twice bool
	// want is a substring of the error; "" means the container is created.
	want string
}

// TestHostileHookInputs: each row is an input a hostile or broken runtime,
// pod or node could hand the hook. Every refusal names the input and the
// rule; nothing is ever written outside the record directory (base/outside
// stays empty), and limits are never set on a cgroup outside the container's.
func TestHostileHookInputs(t *testing.T) {
	const okState = `{"ociVersion":"1.2.0","id":"ctr-1","status":"created","pid":42}`
	withID := func(id string) io.Reader {
		return strings.NewReader(`{"ociVersion":"1.2.0","id":` + jsonString(id) + `,"status":"created","pid":42}`)
	}
	for _, tc := range []hostileCase{
		// stdin
		{name: "endless stdin inside a string", stdin: &endless{prefix: `{"id":"`, fill: 'a'}, want: "larger than 4194304 bytes (4 MiB)"},
		{name: "endless whitespace", stdin: &endless{fill: ' '}, want: "larger than 4194304 bytes (4 MiB)"},
		{name: "a state one byte over the limit", stdin: strings.NewReader(`{"id":"ctr-1","pid":42,"annotations":{"a":"` + strings.Repeat("x", cdihook.MaxStateBytes) + `"}}`),
			want: "larger than 4194304 bytes"},
		{name: "a 1 MiB annotation (CRI-O copies pod annotations) is read", stdin: strings.NewReader(`{"id":"ctr-1","pid":42,"annotations":{"a":"` + strings.Repeat("x", 1<<20) + `"}}`)},
		{name: "empty stdin", stdin: strings.NewReader(""), want: "reading the OCI container state from stdin: EOF"},
		{name: "pid 0", stdin: strings.NewReader(`{"id":"ctr-1","pid":0}`), want: "has no pid"},
		{name: "pid -1", stdin: strings.NewReader(`{"id":"ctr-1","pid":-1}`), want: "has no pid"},
		{name: "pid int64 max", stdin: strings.NewReader(`{"id":"ctr-1","pid":9223372036854775807}`), want: "cgroup of the container not found"},
		{name: "pid past int64", stdin: strings.NewReader(`{"id":"ctr-1","pid":9223372036854775808}`), want: "reading the OCI container state from stdin"},
		// container IDs (containerd and CRI-O: 64 hex digits; runc: letters, digits, _ + - .)
		{name: "id climbing out", stdin: withID("../../outside/x"), want: `container id "../../outside/x" is not an id a runtime makes`},
		{name: "id that is ..", stdin: withID(".."), want: `container id ".." is not an id`},
		{name: "id with a slash", stdin: withID("a/b"), want: `container id "a/b" is not an id`},
		{name: "id with a newline", stdin: withID("a\nb"), want: `container id "a\nb" is not an id`},
		{name: "id with a terminal escape", stdin: withID("a\x1b[2Jb"), want: `container id "a\x1b[2Jb" is not an id`},
		{name: "id with a NUL", stdin: withID("a\x00b"), want: `container id "a\x00b" is not an id`},
		{name: "id starting with a dot", stdin: withID(".hidden"), want: `container id ".hidden" is not an id`},
		{name: "id of 129 characters", stdin: withID(strings.Repeat("a", 129)), want: "at most 128"},
		{name: "id of 3 MiB: the error stays short", stdin: withID(strings.Repeat("a", 3<<20)), want: "more bytes left out)"},
		{name: "empty id", stdin: withID(""), want: `container id "" is not an id`},
		{name: "id of 128 characters is a runtime's", stdin: withID(strings.Repeat("a", 128))},
		// claim UIDs (Kubernetes UIDs: UUIDs)
		{name: "claim climbing out", claim: "../outside", want: `--claim "../outside": not a ResourceClaim UID`},
		{name: "claim with a slash", claim: "a/b", want: `--claim "a/b": not a ResourceClaim UID`},
		{name: "claim in capitals", claim: "ABC", want: `--claim "ABC": not a ResourceClaim UID`},
		{name: "claim of 64 characters", claim: strings.Repeat("a", 64), want: "at most 63"},
		// --record-dir
		{name: "relative record dir", recordDir: "records", want: `--record-dir "records": must be an absolute path`},
		{name: "record dir with ..", recordDir: "/var/lib/../../outside", want: "must be an absolute path without . or .. elements"},
		{name: "claim directory planted as a link outside: no record, container created", setup: func(t *testing.T, base string) {
			mkdir(t, filepath.Join(base, "records"))
			if err := os.Symlink(filepath.Join(base, "outside"), filepath.Join(base, "records", "uid-1")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "temporary record file planted as a link outside: not followed", setup: func(t *testing.T, base string) {
			mkdir(t, filepath.Join(base, "records", "uid-1"))
			if err := os.Symlink(filepath.Join(base, "outside", "victim"), filepath.Join(base, "records", "uid-1", "ctr-1.json.tmp")); err != nil {
				t.Fatal(err)
			}
		}},
		// --gpu
		{name: "one GPU given twice", twice: true, want: "given twice: one limit per GPU"},
		// cgroups from /proc/<pid>/cgroup
		{name: "the root cgroup (v2)", proc: "0::/\n", want: "which is not a cgroup below"},
		{name: "an empty cgroup path", proc: "0::\n", want: "which is not a cgroup below"},
		{name: "a v2 cgroup climbing out", proc: "0::/../../etc\n", want: "which is not a cgroup below"},
		{name: "the root of the v1 memory hierarchy", proc: "4:memory:/\n", want: "names cgroup " + "/sys/fs/cgroup/memory, which is not a cgroup below /sys/fs/cgroup/memory"},
		{name: "a v1 cgroup climbing out of its hierarchy", proc: "4:memory:/../cpu/x\n", want: "which is not a cgroup below /sys/fs/cgroup/memory"},
		{name: "a v1 hierarchy outside the cgroup root", proc: "4:../..:/x\n", want: "which is not a cgroup below /sys/fs/cgroup"},
		{name: "no cgroup at all", proc: "garbage\n", want: "lists no cgroup"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			mkdir(t, filepath.Join(base, "outside"))
			if tc.setup != nil {
				tc.setup(t, base)
			}
			srv, calls := recordingServer(nvml.SUCCESS)
			stdin := tc.stdin
			if stdin == nil {
				stdin = strings.NewReader(okState)
			}
			proc := tc.proc
			if proc == "" {
				proc = v2Cgroup
			}
			claim, recordDir := tc.claim, tc.recordDir
			if claim == "" {
				claim = "uid-1"
			}
			if recordDir == "" {
				recordDir = filepath.Join(base, "records")
			}
			limits := []cdihook.Limit{{UUID: srv.Devices[0].(*server.Device).UUID, Soft: 1 << 30, Hard: 1 << 30}}
			if tc.twice {
				limits = append(limits, cdihook.Limit{UUID: limits[0].UUID, Soft: 2 << 30, Hard: 2 << 30})
			}
			err := cdihook.Run(stdin, cdihook.Options{
				Limits: limits, ProcRoot: procTree(t, "42", proc),
				CgroupRoot: "/sys/fs/cgroup", DriverRoot: driverRoot(t), Open: opener(srv), ClaimUID: claim, RecordDir: recordDir,
			})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused a harmless input: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			case tc.want != "" && len(*calls) != 0:
				t.Errorf("refused, yet limits were set: %+v", *calls)
			}
			if err != nil && len(err.Error()) > 8192 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			for _, c := range *calls {
				if !strings.HasPrefix(c.cgroup, "/sys/fs/cgroup/kubepods") {
					t.Errorf("limits set on %s", c.cgroup)
				}
			}
			if left, _ := os.ReadDir(filepath.Join(base, "outside")); len(left) != 0 {
				t.Errorf("written outside the record directory: %v", left)
			}
		})
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// jsonString quotes s for JSON, escaping control characters as JSON
// requires (strconv.Quote's \x escapes are not JSON).
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&15])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// TestHostileCgroupLinks: a cgroup path that lies below the cgroup root
// as written but is a symbolic link to the root itself or out of it is
// refused: the check is on where the path leads (issue 34).
func TestHostileCgroupLinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	mkdir(t, filepath.Join(root, "kubepods", "pod1", "ctr"))
	for name, target := range map[string]string{"to-root": root, "to-outside": outside, "to-kubepods": filepath.Join(root, "kubepods")} {
		if err := os.Symlink(target, filepath.Join(root, "kubepods", name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, proc, want string
	}{
		{"a real cgroup", "0::/kubepods/pod1/ctr\n", ""},
		{"a link to the root", "0::/kubepods/to-root\n", "which is not a cgroup below"},
		{"a link out of the root", "0::/kubepods/to-outside\n", "which is not a cgroup below"},
		{"a path through a link out of the root", "0::/kubepods/to-outside/ctr\n", "which is not a cgroup below"},
		{"a path through a link back to a real cgroup", "0::/kubepods/to-root/kubepods/pod1/ctr\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cdihook.FindCgroup(procTree(t, "42", tc.proc), root, 42)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused a real cgroup: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
