// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

const billionLaughs = `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: bomb}
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

// endless is standard input that never ends (yes | kubectl gpufrac ...).
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a'
	}
	return len(p), nil
}

func claimWith(name, memory, limit string) string {
	return `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: "` + name + `"}
spec:
  devices:
    requests:
    - name: gpu
      exactly:
        deviceClassName: gpufrac.dev
        capacity: {requests: {memory: "` + memory + `"}}
    config:
    - opaque:
        driver: gpufrac.dev
        parameters:
          apiVersion: gpufrac.dev/v1alpha1
          kind: FractionConfig
          memoryLimit: "` + limit + `"
`
}

func kaiPod(name string, annotations ...string) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Pod\nmetadata:\n  name: \"" + name + "\"\n  annotations:\n")
	for i := 0; i+1 < len(annotations); i += 2 {
		b.WriteString("    " + annotations[i] + ": \"" + annotations[i+1] + "\"\n")
	}
	b.WriteString("spec:\n  containers: [{name: main, image: busybox}]\n")
	return b.String()
}

// TestHostileInputCLI: inputs a careless or hostile user gives the plugin,
// each with the refusal it must meet: an exit status of 1 and a message
// naming the field, the value and the rule, never an out-of-memory crash,
// never a raw control character on the terminal, never output without
// bound.
func TestHostileInputCLI(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string { return writeFile(t, dir, name, content) }
	unknownFields := "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: many}\nspec:\n  devices:\n    config:\n    - opaque:\n        driver: gpufrac.dev\n        parameters:\n          apiVersion: gpufrac.dev/v1alpha1\n          kind: FractionConfig\n"
	for i := range 3000 {
		unknownFields += fmt.Sprintf("          f%d: 1\n", i)
	}
	for _, tc := range []struct {
		name  string
		stdin io.Reader
		args  []string
		want  string // in stdout or stderr
		// maxOut bounds stdout+stderr (0: 16 KiB).
		maxOut int
	}{
		// Unbounded reads.
		{"validate /dev/zero", nil, []string{"validate", "-f", "/dev/zero"}, "reading /dev/zero: more than 32 MiB, the most one input may hold", 0},
		{"validate endless stdin", endless{}, []string{"validate", "-f", "-"}, "reading standard input: more than 32 MiB", 0},
		{"translate /dev/zero", nil, []string{"translate", "-f", "/dev/zero"}, "reading /dev/zero: more than 32 MiB", 0},
		// Parser bombs: the YAML library's own limits hold.
		{"billion laughs", strings.NewReader(billionLaughs), []string{"validate", "-f", "-"}, "<stdin>: document 1: yaml: document contains excessive aliasing", 0},
		{"100,000 nested lists", strings.NewReader(strings.Repeat("[", 100000) + strings.Repeat("]", 100000)), []string{"validate", "-f", "-"}, "<stdin>: document 1: yaml: exceeded max depth of 10000", 0},
		// Empty input.
		{"validate an empty file", nil, []string{"validate", "-f", file("empty.yaml", "")}, "empty.yaml: no Kubernetes object in this input", 0},
		{"validate empty stdin", strings.NewReader(""), []string{"validate", "-f", "-"}, "<stdin>: no Kubernetes object in this input", 0},
		{"validate only comments and separators", strings.NewReader("# nothing\n---\n---\n"), []string{"validate", "-f", "-"}, "<stdin>: no Kubernetes object in this input", 0},
		{"translate empty stdin", strings.NewReader(""), []string{"translate", "-f", "-"}, "<stdin>: no Kubernetes object in this input: it is empty", 0},
		// Unbounded quantities in opaque configs and requests.
		{"memoryLimit 1e30", nil, []string{"validate", "-f", file("l30.yaml", claimWith("c", "10Gi", "1e30"))},
			`memoryLimit: Invalid value: "1e30": must be at most 180Gi, the largest GPU gpufrac knows (b200 in its simulated catalog`, 0},
		{"memoryLimit negative", nil, []string{"validate", "-f", file("lneg.yaml", claimWith("c", "10Gi", "-1Gi"))},
			`memoryLimit: Invalid value: "-1Gi": must be greater than zero`, 0},
		{"memoryLimit above the cluster's largest GPU", nil, []string{"validate", "--gpu-memory", "80Gi", "--gpu-memory", "141Gi", "-f", file("l200.yaml", claimWith("c", "10Gi", "200Gi"))},
			`memoryLimit: Invalid value: "200Gi": must be at most 141Gi, the largest GPU the cluster publishes`, 0},
		{"memory request negative", nil, []string{"validate", "-f", file("rneg.yaml", claimWith("c", "-1Gi", "10Gi"))},
			`spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: "-1Gi": must be greater than zero`, 0},
		{"memory request 1e30", nil, []string{"validate", "-f", file("r30.yaml", claimWith("c", "1e30", "1e30"))},
			`capacity.requests[memory]: Invalid value: "1e30": must be at most 180Gi`, 0},
		{"validate --gpu-memory -1Gi", nil, []string{"validate", "--gpu-memory", "-1Gi", "-f", file("ok.yaml", claimWith("c", "10Gi", "20Gi"))},
			`--gpu-memory "-1Gi": must be a GPU memory size from 1Mi to 1Pi`, 0},
		// Exponents that took minutes of CPU to parse or compare.
		{"memory request 1E-999999999", nil, []string{"validate", "-f", file("eneg.yaml", claimWith("c", "1E-999999999", "10Gi"))},
			"document 1: ResourceClaim/c: the number 1E-999999999 has an exponent outside [-30, 30]", 0},
		{"memoryLimit 1e999999999", nil, []string{"validate", "-f", file("epos.yaml", claimWith("c", "10Gi", "1e999999999"))},
			`spec.devices.config[0].opaque.parameters.memoryLimit: Invalid value: "1e999999999": exponent 999999999 is outside [-30, 30]`, 0},
		{"a KAI memory request of 1E-999999999", nil, []string{"translate", "-f", file("ekai.yaml", kaiPod("p", "nvidia.com/container.main.gpu-memory.request", "1E-999999999"))},
			`annotation nvidia.com/container.main.gpu-memory.request="1E-999999999": gpufrac: exponent -999999999 is outside [-30, 30]`, 0},
		{"translate --gpu-memory 1e999999999", nil, []string{"translate", "--gpu-memory", "1e999999999", "-f", file("p.yaml", kaiPod("p", "gpu-fraction", "0.5"))},
			`--gpu-memory "1e999999999": exponent 999999999 is outside [-30, 30]`, 0},
		// Uncapped messages.
		{"a memoryLimit of 500,000 digits", nil, []string{"validate", "-f", file("digits.yaml", claimWith("c", "10Gi", strings.Repeat("9", 500000)+"x"))},
			"more bytes left out)", 2048},
		{"3,000 unknown fields", nil, []string{"validate", "-f", file("fields.yaml", unknownFields)}, "ResourceClaim/many: ... and 2980 more problems, not listed", 4096},
		// Terminal escapes in names and values.
		{"a claim name that clears the screen", nil, []string{"validate", "-f", file("esc.yaml", claimWith(`evil\e[2J\e]0;title\a`, "10Gi", "-1"))}, `ResourceClaim/evil\x1b[2J\x1b]0;title\x07: `, 0},
		{"a pod name and annotation with escapes", nil, []string{"translate", "-f", file("escpod.yaml", kaiPod(`p\e[31m\u202e`, "gpu-memory", `\e[2J`))},
			`# Pod/p\x1b[31m\u202e: refused: cannot translate KAI GPU-sharing annotations: annotation gpu-memory="\x1b[2J": failed to parse gpu memory annotation value`, 0},
		{"a 300 KB pod name and container name", nil, []string{"translate", "--gpu-memory", "80Gi", "-f", file("big.yaml",
			kaiPod(strings.Repeat("n", 300000), "gpu-fraction", "0.5", "gpu-fraction-container-name", strings.Repeat("c", 300000)))},
			"more bytes left out)", 0},
		// KAI annotations without bounds.
		{"gpu-memory at the int64 edge", nil, []string{"translate", "-f", file("mmax.yaml", kaiPod("p", "gpu-memory", "9223372036854775807"))},
			`annotation gpu-memory="9223372036854775807": gpufrac: must be at most 8796093022207 MiB (more overflows a count of bytes)`, 0},
		{"gpu-memory one MiB past the byte overflow", nil, []string{"translate", "-f", file("mover.yaml", kaiPod("p", "gpu-memory", "8796093022208"))},
			`annotation gpu-memory="8796093022208": gpufrac: must be at most 8796093022207 MiB`, 0},
		{"gpu-memory just under the overflow", nil, []string{"translate", "-f", file("munder.yaml", kaiPod("p", "gpu-memory", "8796093022207"))},
			`annotation gpu-memory="8796093022207": gpufrac: 8796093022207Mi must be at most 180Gi, the largest GPU gpufrac knows`, 0},
		{"gpu-memory above the cluster's GPUs", nil, []string{"translate", "--gpu-memory", "141Gi", "-f", file("m200.yaml", kaiPod("p", "gpu-memory", "200000"))},
			`annotation gpu-memory="200000": gpufrac: 200000Mi must be at most 141Gi, the largest GPU the cluster publishes`, 0},
		{"gpu-memory negative", nil, []string{"translate", "-f", file("mneg.yaml", kaiPod("p", "gpu-memory", "-1"))},
			`annotation gpu-memory="-1": failed to parse gpu memory annotation value: must be a whole number of MiB`, 0},
		{"gpu-fraction-num-devices 1000000000", nil, []string{"translate", "-f", file("n.yaml", kaiPod("p", "gpu-memory", "1024", "gpu-fraction-num-devices", "1000000000"))},
			`annotation gpu-fraction-num-devices="1000000000": gpufrac: must be at most 32, the most devices one claim's allocation holds (resource.k8s.io/v1 AllocationResultsMaxSize)`, 0},
		{"gpu-fraction-num-devices at the int64 edge", nil, []string{"translate", "-f", file("nmax.yaml", kaiPod("p", "gpu-memory", "1024", "gpu-fraction-num-devices", "9223372036854775807"))},
			`annotation gpu-fraction-num-devices="9223372036854775807": gpufrac: must be at most 32`, 0},
		{"gpu-fraction-num-devices past int64", nil, []string{"translate", "-f", file("nover.yaml", kaiPod("p", "gpu-memory", "1024", "gpu-fraction-num-devices", "9223372036854775808"))},
			`annotation gpu-fraction-num-devices="9223372036854775808": fraction count annotation value must be a positive integer greater than 0`, 0},
		{"gpu-fraction 0", nil, []string{"translate", "--gpu-memory", "80Gi", "-f", file("f0.yaml", kaiPod("p", "gpu-fraction", "0"))},
			`annotation gpu-fraction="0": gpu-fraction annotation value must be a positive number smaller than 1.0`, 0},
		{"gpu-fraction 1", nil, []string{"translate", "--gpu-memory", "80Gi", "-f", file("f1.yaml", kaiPod("p", "gpu-fraction", "1"))},
			`annotation gpu-fraction="1": gpu-fraction annotation value must be a positive number smaller than 1.0`, 0},
		{"gpu-fraction NaN", nil, []string{"translate", "--gpu-memory", "80Gi", "-f", file("fnan.yaml", kaiPod("p", "gpu-fraction", "NaN"))},
			`annotation gpu-fraction="NaN": gpu-fraction annotation value must be a positive number smaller than 1.0`, 0},
		{"gpu-fraction -Inf", nil, []string{"translate", "--gpu-memory", "80Gi", "-f", file("finf.yaml", kaiPod("p", "gpu-fraction", "-Inf"))},
			`annotation gpu-fraction="-Inf": gpu-fraction annotation value must be a positive number smaller than 1.0`, 0},
		{"gpu-fraction 1e-300: 0.00 to KAI's binder", nil, []string{"translate", "--gpu-memory", "80Gi", "-f", file("ftiny.yaml", kaiPod("p", "gpu-fraction", "1e-300"))},
			`annotation gpu-fraction="1e-300": KAI's binder refuses this pod: invalid received gpu portion "0.00"`, 0},
		{"translate --gpu-memory -1Gi", nil, []string{"translate", "--gpu-memory", "-1Gi", "-f", file("p.yaml", kaiPod("p", "gpu-fraction", "0.5"))}, `--gpu-memory "-1Gi": must be a GPU memory size from 1Mi to 1Pi`, 0},
		{"translate --gpu-memory 0", nil, []string{"translate", "--gpu-memory", "0", "-f", file("p.yaml", kaiPod("p", "gpu-fraction", "0.5"))}, `--gpu-memory "0": must be a GPU memory size from 1Mi to 1Pi`, 0},
		{"translate --gpu-memory 1e30", nil, []string{"translate", "--gpu-memory", "1e30", "-f", file("p.yaml", kaiPod("p", "gpu-fraction", "0.5"))}, `--gpu-memory "1e30": must be a GPU memory size from 1Mi to 1Pi`, 0},
		// Simulations past any cluster (each ran out of memory).
		{"simulate --nodes 1000000000", nil, []string{"simulate", "--nodes", "1000000000", "--generate", "1"}, "--nodes 1000000000: must be from 1 to 5000", 0},
		{"simulate --nodes -1", nil, []string{"simulate", "--nodes", "-1", "--generate", "1"}, "--nodes -1: must be from 1 to 5000", 0},
		{"simulate --generate 1000000000", nil, []string{"simulate", "--generate", "1000000000"}, "--generate 1000000000: must be from 1 to 150000", 0},
		{"simulate --generate -5", nil, []string{"simulate", "--generate", "-5"}, "--generate -5: must be from 1 to 150000", 0},
		{"simulate replicas 1000000000", nil, []string{"simulate", "-f", file("rep.yaml", kaiPod("p", "gpu-memory", "1024", "gpufrac.dev/replicas", "1000000000"))},
			`pod p: annotation gpufrac.dev/replicas="1000000000": must be a number from 1 to 150000`, 0},
		{"simulate replicas that add up past a cluster", nil, []string{"simulate", "-f", file("rep2.yaml", kaiPod("p", "gpu-memory", "1024", "gpufrac.dev/replicas", "100000")+"---\n"+kaiPod("q", "gpu-memory", "1024", "gpufrac.dev/replicas", "100000"))},
			"the workload holds more than 150000 pods (replicas counted)", 0},
		{"simulate a negative memory request", nil, []string{"simulate", "-f", file("neg.yaml", "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: t}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly: {deviceClassName: gpufrac.dev, capacity: {requests: {memory: -1Gi}}}\n")},
			"document 1: ResourceClaimTemplate t: spec.spec.devices.requests[0].exactly.capacity.requests[memory]: -1Gi: must be greater than zero", 0},
		{"simulate /dev/zero", nil, []string{"simulate", "-f", "/dev/zero"}, "reading /dev/zero: more than 32 MiB", 0},
		// Contradictory or unknown simulate flags, and a product of nodes,
		// GPUs and pods no run finishes (issue 34).
		{"simulate --generate with -f", nil, []string{"simulate", "--generate", "10", "-f", file("gf.yaml", kaiPod("p", "gpu-memory", "1024"))},
			"--generate 10 and -f: give the workload one way, not both", 0},
		{"simulate -o yaml", nil, []string{"simulate", "--generate", "1", "-o", "yaml"}, `--output "yaml": the formats are json, or none for the table`, 0},
		{"simulate 5000 nodes of 8 GPUs and 150000 pods", nil, []string{"simulate", "--nodes", "5000", "--gpus", "h200x8", "--generate", "150000"},
			"--nodes 5000 x 8 GPUs per node x 150000 pods = 6000000000: must be at most 20000000", 0},
		{"simulate 5000 nodes of 8 GPUs and 1000 file pods", nil, []string{"simulate", "--nodes", "5000", "--gpus", "h200x8", "-f", file("rep3.yaml", kaiPod("p", "gpu-memory", "1024", "gpufrac.dev/replicas", "1000"))},
			"--nodes 5000 x 8 GPUs per node x 1000 pods = 40000000: must be at most 20000000", 0},
		{"translate --gpu-memory 1 (a byte)", nil, []string{"translate", "--gpu-memory", "1", "-f", file("p.yaml", kaiPod("p", "gpu-fraction", "0.5"))}, `--gpu-memory "1": must be a GPU memory size from 1Mi to 1Pi`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin := tc.stdin
			if stdin == nil {
				stdin = strings.NewReader("")
			}
			var out, errOut bytes.Buffer
			root := NewRootCommand(IOStreams{In: stdin, Out: &out, ErrOut: &errOut})
			root.SetArgs(tc.args)
			code := ExitCode(root.Execute(), &errOut)
			all := out.String() + errOut.String()
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if !strings.Contains(all, tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, trim(all))
			}
			if limit := max(tc.maxOut, 16<<10); len(all) > limit {
				t.Errorf("%d bytes of output, want at most %d", len(all), limit)
			}
			if strings.ContainsAny(all, "\x1b\a\r\u202e\u009b") {
				t.Errorf("a raw control character reached the terminal:\n%q", trim(all))
			}
		})
	}
}

// TestHostileDuplicateGPUMemory: a size given twice (or as the same
// quantity written two ways) is one GPU size: one subrequest, not two of
// the same name, which the API server would refuse.
func TestHostileDuplicateGPUMemory(t *testing.T) {
	dir := t.TempDir()
	pod := writeFile(t, dir, "p.yaml", kaiPod("p", "gpu-fraction", "0.5"))
	for _, args := range [][]string{
		{"--gpu-memory", "141Gi", "--gpu-memory", "141Gi"},
		{"--gpu-memory", "141Gi", "--gpu-memory", "144384Mi", "--gpu-memory", "80Gi"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := NewRootCommand(IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut})
			root.SetArgs(append([]string{"translate", "-f", pod}, args...))
			if code := ExitCode(root.Execute(), &errOut); code != 0 {
				t.Fatalf("exit status %d: %s", code, errOut.String())
			}
			names := map[string]int{}
			for line := range strings.SplitSeq(out.String(), "\n") {
				// The subrequests of the claim's firstAvailable.
				if n, ok := strings.CutPrefix(strings.TrimSpace(line), "name: size-"); ok {
					names[n]++
				}
			}
			for n, c := range names {
				if c > 1 {
					t.Errorf("name %s appears %d times:\n%s", n, c, out.String())
				}
			}
			if names["141gi"] != 1 {
				t.Errorf("want one subrequest for 141Gi, got names %v:\n%s", names, out.String())
			}
		})
	}
}

// TestHostileClusterNamesAreEscaped: `why` prints names it reads from the
// cluster; one that carries escape sequences is printed inert.
func TestHostileClusterNamesAreEscaped(t *testing.T) {
	const evil = "big\x1b]0;owned\a"
	objs := whyCluster(t)
	for _, o := range objs {
		switch o := o.(type) {
		case *resourceapi.ResourceClaimTemplate:
			o.Name = evil
		case *corev1.Pod:
			o.Spec.ResourceClaims[0].ResourceClaimTemplateName = ptr.To(evil)
		}
	}
	var out bytes.Buffer
	cmd := newRootCommand(IOStreams{Out: &out, ErrOut: &out}, func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
		return fake.NewClientset(objs...), nil
	})
	cmd.SetArgs([]string{"why", "too-big", "-n", "team"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("why: %v\n%s", err, out.String())
	}
	if strings.ContainsAny(out.String(), "\x1b\a") || !strings.Contains(out.String(), `big\x1b]0;owned\x07`) {
		t.Errorf("the template's name is not escaped:\n%q", out.String())
	}
}

func trim(s string) string {
	if len(s) > 2000 {
		return s[:2000] + "..."
	}
	return s
}

// endlessMetrics is a node's /metrics that never ends.
type endlessMetrics struct{}

func (endlessMetrics) DoRaw(context.Context) ([]byte, error) {
	return nil, errors.New("DoRaw reads without bound: use Stream")
}
func (endlessMetrics) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(endless{}), nil
}

// TestHostileMetricsAreBounded: `why` reads each node's /metrics through
// the pod proxy; a node that sends without end is read up to 16 MiB and
// reported as not seen, and why still answers.
func TestHostileMetricsAreBounded(t *testing.T) {
	objs := whyCluster(t)
	objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gpufrac-kubelet-plugin-abc", Namespace: "gpufrac",
		Labels: map[string]string{"app.kubernetes.io/name": "gpufrac", "app.kubernetes.io/component": "kubelet-plugin"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "kubelet-plugin",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}})
	for _, o := range objs {
		if c, ok := o.(*resourceapi.ResourceClaim); ok && c.Name == "held-gpu-0" {
			r := c.Status.Allocation.Devices.Results[0]
			c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: r.Driver, Pool: r.Pool, Device: r.Device,
				ShareID: ptr.To(string(*r.ShareID)), Data: &runtime.RawExtension{Raw: []byte(`{"uuid":"GPU-X","memoryRequest":"100Gi"}`)}}}
		}
	}
	client := fake.NewClientset(objs...)
	client.PrependProxyReactor("pods", func(k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		return true, endlessMetrics{}, nil
	})
	got := runWhy(t, client, "resourceclaim/held-gpu-0", "-n", "other")
	if !strings.Contains(got, "more than 16 MiB, the most read of one node's metrics") {
		t.Errorf("output:\n%s", trim(got))
	}
}

// TestHostileAllocationsInStatus: the API server accepts any
// consumedCapacity in a claim's status; `status` lists a share whose
// memory is outside (0, the GPU's memory] as invalid and leaves it out of
// the sums (1e30 read as 0, sums overflowed int64).
func TestHostileAllocationsInStatus(t *testing.T) {
	capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: resource.MustParse("141Gi")}}
	objs := []runtime.Object{&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: "gpufrac.dev", NodeName: ptr.To("node-a"), Pool: resourceapi.ResourcePool{Name: "node-a", ResourceSliceCount: 1},
		Devices: []resourceapi.Device{{Name: "gpu-0", Capacity: capacity}}}}}
	for _, v := range []string{"40Gi", "1e30", "-1Gi", "9223372036854775807", "142Gi"} {
		objs = append(objs, &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "c" + v, Namespace: "team"}, Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: "gpufrac.dev", Pool: "node-a", Device: "gpu-0", ShareID: ptr.To(types.UID("s" + v)),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(v)}}}}}}})
	}
	var out bytes.Buffer
	cmd := newRootCommand(IOStreams{Out: &out, ErrOut: &out}, func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) {
		return fake.NewClientset(objs...), nil
	})
	cmd.SetArgs([]string{"status"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	lines := strings.Split(got, "\n")
	if f := strings.Fields(lines[1]); strings.Join(f, " ") != "node-a gpu-0 141Gi - 40Gi 40Gi 0.28 5" {
		t.Errorf("gpu-0 row %q, want only the 40Gi share summed", lines[1])
	}
	for _, v := range []string{"1e30", "-1Gi", "9223372036854775807", "142Gi"} {
		if !strings.Contains(got, "INVALID: consumed memory "+v+" is outside (0, 141Gi], the GPU's memory") {
			t.Errorf("share of %s not flagged:\n%s", v, got)
		}
	}
}
