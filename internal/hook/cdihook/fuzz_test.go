// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdihook_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/hook/cdihook"
	"github.com/gpufrac/gpufrac/internal/hook/record"
)

// FuzzReadState: any stdin gives a state with a usable pid or an error.
func FuzzReadState(f *testing.F) {
	for _, seed := range []string{state, `{"ociVersion":"1.2.0","id":"x","status":"created"}`, `{"pid":-1}`, `{"pid":1e20}`, ``, `[`,
		`{"pid":9223372036854775807}`, `{"pid":9223372036854775808}`, `{"pid":-9223372036854775808}`, `{"pid":2147483648}`, `{"pid":1}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := cdihook.ReadState(bytes.NewReader(data))
		if len(data) > cdihook.MaxStateBytes && err == nil {
			t.Fatalf("read a state of %d bytes", len(data))
		}
		if err == nil && st.Pid <= 0 {
			t.Fatalf("accepted a state without a pid: %+v", st)
		}
	})
}

// FuzzRecordPath: IDs the hook accepts give a record path strictly inside
// the record directory, named after the container.
func FuzzRecordPath(f *testing.F) {
	for _, seed := range [][2]string{{"uid-1", "ctr-1"}, {"../x", "ctr"}, {"uid", "../../x"}, {"uid", ".."}, {"uid", "a/b"},
		{"uid", "a\x00b"}, {"", "ctr"}, {"uid", strings.Repeat("a", 128)}, {strings.Repeat("a", 63), "x"}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, claim, id string) {
		if claim == "" || cdihook.ValidateClaimUID(claim) != nil || cdihook.ValidateContainerID(id) != nil {
			return
		}
		const dir = "/var/lib/gpufrac/containers"
		p := record.Path(dir, claim, id)
		if filepath.Dir(filepath.Dir(p)) != dir || filepath.Base(p) != id+".json" {
			t.Fatalf("claim %q container %q: record path %s", claim, id, p)
		}
	})
}

// FuzzFindCgroup: whatever /proc/<pid>/cgroup says, the hook either
// refuses or names a cgroup strictly below its hierarchy's root, which is
// inside the cgroup root.
func FuzzFindCgroup(f *testing.F) {
	for _, seed := range []string{"0::/kubepods/x\n", "0::/\n", "0::\n", "0::/../../etc\n", "4:memory:/\n", "4:memory:/../x\n",
		"4:../..:/x\n", "1:name=systemd:/a\n0::/\n", "", "::::\n", "0::/a/../..\n"} {
		f.Add(seed)
	}
	const root = "/sys/fs/cgroup"
	f.Fuzz(func(t *testing.T, content string) {
		proc := t.TempDir()
		if err := os.MkdirAll(filepath.Join(proc, "7"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(proc, "7", "cgroup"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		cg, err := cdihook.FindCgroup(proc, root, 7)
		if err != nil {
			return
		}
		below := func(dir, p string) bool {
			rel, err := filepath.Rel(dir, p)
			return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, "../")
		}
		if !below(cg.Root, cg.Path) || (cg.Root != root && !below(root, cg.Root)) {
			t.Fatalf("%q: cgroup %+v is not below its root inside %s", content, cg, root)
		}
	})
}
