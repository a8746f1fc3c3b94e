// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package manifestcheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// lines checks docs as one input named "test.yaml" and renders the results
// the way the command prints them.
func lines(docs ...string) []string {
	var out []string
	for _, r := range Check(Input{Name: "test.yaml", Data: []byte(strings.Join(docs, "\n---\n"))}) {
		out = append(out, r.Lines()...)
	}
	return out
}

const (
	validClass = `
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: sm-sharing.gpufrac.dev}
spec:
  selectors:
  - cel: {expression: 'device.driver == "gpufrac.dev"'}
  config:
  - opaque:
      driver: gpufrac.dev
      parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, computeMode: SMSharing}
`
	validTemplate = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: llm-40g}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: gpufrac.dev
          capacity: {requests: {memory: 40Gi}}
      config:
      - requests: [gpu]
        opaque:
          driver: gpufrac.dev
          parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 60Gi}
`
	// claimHead, completed by claim(), is a claim of 40Gi whose config's
	// parameters are the caller's.
	claimHead = `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: c, namespace: ns}
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
        parameters: `
	pod = `
apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  containers: [{name: c, image: busybox}]
`
)

func claim(params string) string { return claimHead + params + "\n" }

func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		docs []string
		want []string
	}{{
		name: "valid class",
		docs: []string{validClass},
		want: []string{"DeviceClass/sm-sharing.gpufrac.dev: valid"},
	}, {
		name: "valid template",
		docs: []string{validTemplate},
		want: []string{"ResourceClaimTemplate/llm-40g: valid"},
	}, {
		name: "claim with limit below request",
		docs: []string{claim(`{apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 30Gi}`)},
		want: []string{`ResourceClaim/c: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi`},
	}, {
		// The request defaults to the whole GPU, above any limit below
		// it: such a claim could never be prepared.
		name: "claim with a limit and no memory request",
		docs: []string{strings.Replace(claim(`{apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 30Gi}`), "        capacity: {requests: {memory: 40Gi}}\n", "", 1)},
		want: []string{`ResourceClaim/c: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": needs a memory request on request gpu (spec.devices.requests[0].exactly.capacity.requests[memory]): without one the request is the whole GPU, and a limit cannot be below the request; set the request, or drop memoryLimit to have the whole GPU`},
	}, {
		// A monitoring request gets no limits (internal/core/plan refuses
		// the same claim at Prepare); without a config it is valid.
		name: "a FractionConfig on an adminAccess request",
		docs: []string{strings.Replace(claim(`{apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 40Gi}`), "        deviceClassName: gpufrac.dev\n", "        deviceClassName: gpufrac.dev\n        adminAccess: true\n", 1)},
		want: []string{`ResourceClaim/c: spec.devices.config[0].opaque.parameters: Forbidden: applies to request gpu, which asks for adminAccess (a monitoring pod): it gets the GPU without memory limits, MPS or a compute mode, so a FractionConfig cannot apply to it; list only the fraction requests in this config's requests`},
	}, {
		name: "an adminAccess request without a config",
		docs: []string{strings.Replace(strings.Split(claim(""), "    config:")[0], "        deviceClassName: gpufrac.dev\n", "        deviceClassName: gpufrac.dev\n        adminAccess: true\n", 1)},
		want: []string{"ResourceClaim/c: valid"},
	}, {
		name: "a kind with no apiVersion",
		docs: []string{"kind: ResourceClaim\nmetadata: {name: bare}\n"},
		want: []string{"ResourceClaim/bare: ignored (no apiVersion: checked are only resource.k8s.io/v1 ResourceClaim, ResourceClaimTemplate and DeviceClass; add apiVersion: resource.k8s.io/v1)"},
	}, {
		name: "unknown field in config",
		docs: []string{claim(`{apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimt: 60Gi}`)},
		want: []string{`ResourceClaim/c: spec.devices.config[0].opaque.parameters: Forbidden: unknown field "memoryLimt"`},
	}, {
		name: "every problem of a config",
		docs: []string{claim(`{apiVersion: gpufrac.dev/v1, kind: FractionConfig, memoryLimit: 0, computeMode: Exclusive}`)},
		want: []string{
			`ResourceClaim/c: spec.devices.config[0].opaque.parameters.apiVersion: Unsupported value: "gpufrac.dev/v1": supported values: "gpufrac.dev/v1alpha1"`,
			`ResourceClaim/c: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "0": must be greater than zero`,
			`ResourceClaim/c: spec.devices.config[0].opaque.parameters.computeMode: Unsupported value: "Exclusive": supported values: "TimeSlicing", "SMSharing"`,
		},
	}, {
		name: "DeviceClass with activeThreadPercentage under TimeSlicing",
		docs: []string{`
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpufrac.dev}
spec:
  config:
  - opaque:
      driver: gpufrac.dev
      parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, activeThreadPercentage: 50}
`},
		want: []string{`DeviceClass/gpufrac.dev: spec.config[0].opaque.parameters.activeThreadPercentage: Forbidden: only allowed with computeMode SMSharing, not TimeSlicing (the default when computeMode is unset)`},
	}, {
		name: "multi-document file mixing kinds",
		docs: []string{
			"# a comment-only document is skipped\n",
			validClass, pod,
			claim(`{apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 30Gi}`),
			validTemplate,
			`{"apiVersion": "resource.k8s.io/v1beta2", "kind": "ResourceClaim", "metadata": {"name": "old"}}`,
		},
		want: []string{
			"DeviceClass/sm-sharing.gpufrac.dev: valid",
			"Pod/web: ignored",
			`ResourceClaim/c: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi`,
			"ResourceClaimTemplate/llm-40g: valid",
			"ResourceClaim/old: ignored (only resource.k8s.io/v1 is checked, not resource.k8s.io/v1beta2)",
		},
	}, {
		name: "firstAvailable subrequests",
		docs: []string{`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: fa}
spec:
  devices:
    requests:
    - name: gpu
      firstAvailable:
      - {name: big, deviceClassName: gpufrac.dev, capacity: {requests: {memory: 70Gi}}}
      - {name: small, deviceClassName: gpufrac.dev, capacity: {requests: {memory: 20Gi}}}
    - name: other
      firstAvailable:
      - {name: a, deviceClassName: gpufrac.dev, capacity: {requests: {memory: 50Gi}}}
      - {name: b, deviceClassName: gpufrac.dev, capacity: {requests: {memory: 10Gi}}}
    config:
    - requests: [gpu]      # both subrequests of gpu
      opaque:
        driver: gpufrac.dev
        parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 30Gi}
    - requests: [other/b]  # that subrequest only: 50Gi does not apply
      opaque:
        driver: gpufrac.dev
        parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 12Gi}
    - requests: [other/a]
      opaque:
        driver: gpufrac.dev
        parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 12Gi}
`},
		want: []string{
			`ResourceClaim/fa: spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 70Gi`,
			`ResourceClaim/fa: spec.devices.config[2].opaque.parameters.memoryLimit: Invalid value: "12Gi": must not be below the guaranteed memory request 50Gi`,
		},
	}, {
		name: "config for another driver ignored",
		docs: []string{`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nic}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpufrac.dev, capacity: {requests: {memory: 40Gi}}}
    config:
    - opaque:
        driver: example.com/nic
        parameters: {whatever: 1, memoryLimit: 1Gi}
`},
		want: []string{"ResourceClaim/nic: valid"},
	}, {
		name: "claim relying on a class's SMSharing, class in the input",
		docs: []string{validClass, `
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: mps}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: sm-sharing.gpufrac.dev}
    config:
    - opaque:
        driver: gpufrac.dev
        parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, activeThreadPercentage: 50}
`},
		want: []string{"DeviceClass/sm-sharing.gpufrac.dev: valid", "ResourceClaim/mps: valid"},
	}, {
		name: "claim relying on a class that is not in the input",
		docs: []string{`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: mps}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: sm-sharing.gpufrac.dev}
    config:
    - opaque:
        driver: gpufrac.dev
        parameters: {apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, activeThreadPercentage: 50}
`},
		want: []string{`ResourceClaim/mps: spec.devices.config[0].opaque.parameters.activeThreadPercentage: Forbidden: only allowed with computeMode SMSharing, not TimeSlicing (the default when computeMode is unset)`},
	}, {
		name: "misspelled field of the claim itself",
		docs: []string{`
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: typo}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpufrac.dev, capcity: {requests: {memory: 40Gi}}}
`},
		want: []string{`ResourceClaim/typo: spec.devices.requests[0].exactly: Forbidden: unknown field "capcity"`},
	}, {
		name: "a List",
		docs: []string{`{"apiVersion": "v1", "kind": "List", "items": [` +
			`{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpufrac.dev"}},` +
			`{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}]}`},
		want: []string{"DeviceClass/gpufrac.dev: valid", "ConfigMap/cm: ignored"},
	}, {
		name: "a typed list whose items leave out their kind",
		docs: []string{`{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClassList", "items": [` +
			`{"metadata": {"name": "bad"}, "spec": {"config": [{"opaque": {"driver": "gpufrac.dev", "parameters": {"apiVersion": "gpufrac.dev/v1alpha1", "kind": "FractionConfig", "computeMode": "MPS"}}}]}}]}`},
		want: []string{`DeviceClass/bad: spec.config[0].opaque.parameters.computeMode: Unsupported value: "MPS": supported values: "TimeSlicing", "SMSharing"`},
	}, {
		name: "documents that do not parse",
		docs: []string{validClass, "kind: [unclosed\n", "just a string\n", "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nmetadata: {name: b}\n", pod},
		want: []string{
			"DeviceClass/sm-sharing.gpufrac.dev: valid",
			"test.yaml: document 2: yaml: line 2: did not find expected ',' or ']'",
			"test.yaml: document 3: not a Kubernetes object: expected a mapping with apiVersion, kind and metadata",
			`test.yaml: document 4: yaml: unmarshal errors: line 4: key "metadata" already set in map`,
			"Pod/web: ignored",
		},
	}, {
		name: "an object of ours that does not decode",
		docs: []string{"apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: x}\nspec: {config: 3}\n"},
		want: []string{"test.yaml: document 1: DeviceClass/x: json: cannot unmarshal number into Go struct field DeviceClassSpec.spec.config of type []v1.DeviceClassConfiguration"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lines(tt.docs...); !slices.Equal(got, tt.want) {
				t.Errorf("\n got: %q\nwant: %q", got, tt.want)
			}
		})
	}
}

func TestFailed(t *testing.T) {
	for _, tt := range []struct {
		docs []string
		want bool
	}{
		{[]string{validClass, pod}, false},
		{[]string{claim(`{apiVersion: gpufrac.dev/v1alpha1, kind: FractionConfig, memoryLimit: 30Gi}`)}, true},
		{[]string{"kind: [unclosed\n"}, true},
	} {
		failed := false
		for _, r := range Check(Input{Name: "x", Data: []byte(strings.Join(tt.docs, "\n---\n"))}) {
			failed = failed || r.Failed()
		}
		if failed != tt.want {
			t.Errorf("%q: failed = %v, want %v", tt.docs, failed, tt.want)
		}
	}
}

// TestDemoManifests keeps the examples a newcomer runs valid as they are on
// disk: the demo's claim and the DeviceClasses it applies.
func TestDemoManifests(t *testing.T) {
	want := map[string][]string{
		"deployments/deviceclasses.yaml": {"DeviceClass/gpufrac.dev: valid", "DeviceClass/sm-sharing.gpufrac.dev: valid", "DeviceClass/mig.gpufrac.dev: valid"},
		"demo/claim-template-40g.yaml":   {"ResourceClaimTemplate/llm-40g: valid"},
		"demo/monitor.yaml":              {"Namespace/gpufrac-monitoring: ignored", "ResourceClaimTemplate/gpu-monitor: valid"},
	}
	for name, wantLines := range want {
		f, err := os.Open(filepath.Join("..", "..", filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		results, err := CheckReader(f, filepath.Base(name))
		_ = f.Close() // read-only: nothing to lose
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range results {
			got = append(got, r.Lines()...)
		}
		if !slices.Equal(got, wantLines) {
			t.Errorf("%s:\n got: %q\nwant: %q", name, got, wantLines)
		}
	}
}
