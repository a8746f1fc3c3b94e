// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	goodClass = `apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpufrac.dev}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpufrac.dev"'}
`
	badClaim = `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: small}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpufrac.dev
        capacity: {requests: {memory: 40Gi}}
    config:
    - opaque:
        driver: gpufrac.dev
        parameters:
          apiVersion: gpufrac.dev/v1alpha1
          kind: FractionConfig
          memoryLimit: 30Gi
`
)

func run(t *testing.T, stdin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut})
	root.SetArgs(args)
	err := root.Execute()
	code = ExitCode(err, &errOut)
	return out.String(), errOut.String(), code
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "class.yaml", goodClass)
	bad := writeFile(t, dir, "claim.yaml", badClaim)

	tests := []struct {
		name       string
		stdin      string
		args       []string
		wantOut    string
		wantErrOut string
		wantCode   int
	}{{
		name:     "valid file",
		args:     []string{"validate", "-f", good},
		wantOut:  "DeviceClass/gpufrac.dev: valid\n",
		wantCode: 0,
	}, {
		name: "a problem: one line, exit 1, no usage",
		args: []string{"validate", "--filename", good, "-f", bad},
		wantOut: "DeviceClass/gpufrac.dev: valid\n" +
			`ResourceClaim/small: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi` + "\n",
		wantCode: 1,
	}, {
		name:     "standard input",
		stdin:    "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n---\n" + goodClass,
		args:     []string{"validate", "-f", "-"},
		wantOut:  "Pod/web: ignored\nDeviceClass/gpufrac.dev: valid\n",
		wantCode: 0,
	}, {
		name:     "a directory",
		args:     []string{"validate", "-f", dir},
		wantOut:  "ResourceClaim/small: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: \"30Gi\": must not be below the guaranteed memory request 40Gi\nDeviceClass/gpufrac.dev: valid\n",
		wantCode: 1,
	}, {
		name:     "unparsable document names the file and the document",
		stdin:    goodClass + "---\nkind: [\n",
		args:     []string{"validate", "-f", "-"},
		wantOut:  "DeviceClass/gpufrac.dev: valid\n<stdin>: document 2: yaml: line 1: did not find expected node content\n",
		wantCode: 1,
	}, {
		name:       "missing file",
		args:       []string{"validate", "-f", filepath.Join(dir, "nope.yaml")},
		wantErrOut: "error: stat " + filepath.Join(dir, "nope.yaml") + ": no such file or directory\n",
		wantCode:   1,
	}, {
		name:       "no -f",
		args:       []string{"validate"},
		wantErrOut: "error: required flag(s) \"filename\" not set\n",
		wantCode:   1,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(t, tt.stdin, tt.args...)
			if out != tt.wantOut {
				t.Errorf("stdout:\n got: %q\nwant: %q", out, tt.wantOut)
			}
			if errOut != tt.wantErrOut {
				t.Errorf("stderr:\n got: %q\nwant: %q", errOut, tt.wantErrOut)
			}
			if code != tt.wantCode {
				t.Errorf("exit code %d, want %d", code, tt.wantCode)
			}
		})
	}
}

// TestValidateProblemsAreAnExitError pins the contract main relies on: the
// problems are already printed, and Execute returns an ExitError with code
// 1 that must not be printed again.
func TestValidateProblemsAreAnExitError(t *testing.T) {
	path := writeFile(t, t.TempDir(), "claim.yaml", badClaim)
	var out, errOut bytes.Buffer
	root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
	root.SetArgs([]string{"validate", "-f", path})
	err := root.Execute()
	var exit *ExitError
	if !errors.As(err, &exit) || exit.Code != 1 {
		t.Fatalf("Execute returned %v, want an ExitError with code 1", err)
	}
	if errOut.Len() != 0 {
		t.Errorf("cobra printed to stderr: %q", errOut.String())
	}
}
