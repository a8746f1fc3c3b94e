// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package ldcachehook_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/hook/ldcachehook"
	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// bundle writes an OCI bundle whose config names root (relative or not)
// and returns the OCI state the runtime gives a hook.
func bundle(t *testing.T, root string) *bytes.Reader {
	t.Helper()
	dir := t.TempDir()
	cfg := `{"ociVersion":"1.2.0","root":{"path":"` + root + `"}}`
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader([]byte(`{"ociVersion":"1.2.0","id":"c1","status":"created","pid":1,"bundle":"` + dir + `"}`))
}

func TestContainerRoot(t *testing.T) {
	st := bundle(t, "rootfs")
	got, err := ldcachehook.ContainerRoot(st)
	if err != nil || filepath.Base(got) != "rootfs" || !filepath.IsAbs(got) {
		t.Errorf("a relative root.path: %q %v, want <bundle>/rootfs", got, err)
	}
	if got, err := ldcachehook.ContainerRoot(bundle(t, "/abs/rootfs")); err != nil || got != "/abs/rootfs" {
		t.Errorf("an absolute root.path: %q %v", got, err)
	}
	for name, st := range map[string]*bytes.Reader{
		"the host's root":   bundle(t, "/"),
		"no root":           bundle(t, ""),
		"a relative bundle": bytes.NewReader([]byte(`{"bundle":"x"}`)),
		"not JSON":          bytes.NewReader([]byte(`{`)),
	} {
		if _, err := ldcachehook.ContainerRoot(st); err == nil {
			t.Errorf("%s was accepted", name)
		}
	}
}

// stubLibrary compiles a shared object with the given SONAME.
func stubLibrary(t *testing.T, path, soname string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	mustrun.Need(t, err == nil, "gcc is needed to build a stub driver library")
	src := filepath.Join(t.TempDir(), "stub.c")
	if err := os.WriteFile(src, []byte("int gpufrac_stub(void) { return 0; }\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-shared", "-fPIC", "-Wl,-soname,"+soname, "-o", path, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
}

func needRootAndLDConfig(t *testing.T) {
	t.Helper()
	mustrun.NeedRoot(t, "ldconfig -r chroots")
	_, err := os.Stat("/sbin/ldconfig")
	mustrun.Need(t, err == nil, "no /sbin/ldconfig on this host")
}

// The host's ldconfig, chrooted into the container's root, lists the
// driver's libraries in the container's cache and creates their SONAME
// links; the drop-in keeps the folder for a later ldconfig.
func TestRunUpdatesTheContainersCache(t *testing.T) {
	needRootAndLDConfig(t)
	root := t.TempDir()
	stubLibrary(t, filepath.Join(root, "usr/lib64/libcuda.so.580.65.06"), "libcuda.so.1")
	if err := ldcachehook.Run(bundle(t, root), ldcachehook.Options{Folders: []string{"/usr/lib64"}}); err != nil {
		t.Fatal(err)
	}
	link, err := os.Readlink(filepath.Join(root, "usr/lib64/libcuda.so.1"))
	if err != nil || link != "libcuda.so.580.65.06" {
		t.Errorf("libcuda.so.1 → %q (%v), want libcuda.so.580.65.06", link, err)
	}
	cache, err := os.ReadFile(filepath.Join(root, "etc/ld.so.cache"))
	if err != nil || !bytes.HasPrefix(cache, []byte("glibc-ld.so.cache1.1")) || !bytes.Contains(cache, []byte("/usr/lib64/libcuda.so.1")) {
		t.Errorf("the container's cache (%v) does not list /usr/lib64/libcuda.so.1", err)
	}
	dropIn, err := os.ReadFile(filepath.Join(root, ldcachehook.DropIn))
	if err != nil || !strings.Contains(string(dropIn), "\n/usr/lib64\n") {
		t.Errorf("drop-in %q (%v), want /usr/lib64", dropIn, err)
	}
}

// An image whose /etc is a link out of its root (here to a host folder)
// gets its files inside its root: the hook never writes through it.
func TestRunWritesNothingOutsideTheContainerRoot(t *testing.T) {
	needRootAndLDConfig(t)
	root, outside := t.TempDir(), t.TempDir()
	stubLibrary(t, filepath.Join(root, "usr/lib64/libcuda.so.580.65.06"), "libcuda.so.1")
	if err := os.Symlink(outside, filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	err := ldcachehook.Run(bundle(t, root), ldcachehook.Options{Folders: []string{"/usr/lib64"}})
	entries, _ := os.ReadDir(outside)
	if len(entries) != 0 {
		t.Errorf("the hook wrote %v outside the container's root (err %v)", entries, err)
	}
}

func TestRunRefusesBadFolders(t *testing.T) {
	for _, f := range []string{"usr/lib64", "/usr/../etc", "/a\nb"} {
		if err := ldcachehook.Run(bundle(t, t.TempDir()), ldcachehook.Options{Folders: []string{f}}); err == nil {
			t.Errorf("--folder %q was accepted", f)
		}
	}
	if err := ldcachehook.Run(bundle(t, t.TempDir()), ldcachehook.Options{}); err == nil {
		t.Error("no --folder was accepted")
	}
}
