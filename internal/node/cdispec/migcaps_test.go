// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cdispec_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpufrac/gpufrac/internal/node/cdispec"
)

// The sample is the one NVIDIA's DRA driver documents
// (internal/common/nvcaps.go) for /proc/driver/nvidia-caps/mig-minors.
const migMinors = `config 1
monitor 2
gpu0/gi0/access 3
gpu0/gi0/ci0/access 4
gpu0/gi0/ci1/access 5
gpu3/gi3/access 435
gpu3/gi3/ci3/access 439
`

const procDevices = `Character devices:
  1 mem
195 nvidia
236 nvidia-caps
237 nvidia-caps-imex-channels

Block devices:
  8 sd
`

func TestHostMIGCaps(t *testing.T) {
	root := t.TempDir()
	for path, text := range map[string]string{cdispec.MIGMinorsFile: migMinors, cdispec.ProcDevices: procDevices} {
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	nodes, err := cdispec.HostMIGCaps(root)(3, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range nodes {
		if n.Type != "c" || n.Major != 236 {
			t.Errorf("node %+v: want a character device of major 236 (nvidia-caps, not the imex channels)", n)
		}
		got = append(got, n.Path)
	}
	if want := []string{"/dev/nvidia-caps/nvidia-cap435", "/dev/nvidia-caps/nvidia-cap439"}; !slices.Equal(got, want) {
		t.Errorf("paths %v, want %v", got, want)
	}
	if nodes[1].Minor != 439 {
		t.Errorf("minor %d", nodes[1].Minor)
	}
	// An instance the file does not list is an error, not a guess.
	if _, err := cdispec.HostMIGCaps(root)(0, 1, 0); err == nil || !strings.Contains(err.Error(), "gpu0/gi1/access") {
		t.Errorf("an unlisted instance: %v", err)
	}
	if _, err := cdispec.CharMajor([]byte("Character devices:\n195 nvidia\n"), "nvidia-caps"); err == nil {
		t.Error("a missing nvidia-caps major was found")
	}
}
