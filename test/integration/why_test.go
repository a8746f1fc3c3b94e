// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/internal/cli/why"
)

// TestWhyNamesWhatTheSchedulerDoesNot: two pods of 100Gi take one H200
// each (140Gi offered: the node runs MPS daemons, so 1Gi of each GPU is the
// server's); a third pod of 60Gi has 80Gi free in total but 40Gi at most
// on one GPU. The real scheduler says only "cannot allocate all claims";
// `kubectl gpufrac why` names the fragmentation, the largest request that
// fits now and the pod whose departure lets it in, and the real scheduler
// then places it on exactly the GPU `why` named. A user who may read only
// the namespace gets the same reason and is told what was hidden.
func TestWhyNamesWhatTheSchedulerDoesNot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.node("h200x2")
	class := e.classFor("why", "")
	e.createTemplate(claimTemplate("share-100g", class, "100Gi", 1, ""))
	e.createTemplate(claimTemplate("share-60g", class, "60Gi", 1, ""))
	for _, p := range []string{"a", "b"} {
		e.createPod(p, "share-100g", node.Name)
	}
	e.waitRunning("a")
	e.waitRunning("b")

	e.createPod("frag", "share-60g", node.Name)
	var schedulerSays string
	e.poll("pod frag to be unschedulable", func() (bool, error) {
		msg, ok := unschedulable(e.pod("frag"))
		schedulerSays = msg
		return ok, nil
	})
	if !strings.Contains(schedulerSays, "cannot allocate all claims") {
		t.Fatalf("the scheduler says %q; this test expects its generic DRA reason", schedulerSays)
	}
	for _, specific := range []string{"fragment", "40Gi", "gpu-"} {
		if strings.Contains(schedulerSays, specific) {
			t.Errorf("the scheduler's own message %q already says %q; the test no longer shows what why adds", schedulerSays, specific)
		}
	}

	got := runWhy(t, cp.Kubeconfig, "frag", "-n", e.ns, "-o", "json")
	verdict := nodeVerdict(t, got, node.Name)
	if verdict.Fits || len(verdict.Reasons) == 0 || verdict.Reasons[0].Code != why.Fragmented ||
		!strings.Contains(verdict.Reasons[0].Message, "80Gi free in total across 2 GPUs, but at most 40Gi on one") {
		t.Fatalf("why on node %s: %+v, want Fragmented with 80Gi in total, 40Gi at most", node.Name, verdict)
	}
	if len(got.Unseen) != 0 {
		t.Errorf("an admin was told things were hidden: %v", got.Unseen)
	}
	var smaller, leave *why.Suggestion
	for i, s := range got.Suggestions {
		switch s.Kind {
		case "SmallerRequest":
			smaller = &got.Suggestions[i]
		case "AfterPodsLeave":
			leave = &got.Suggestions[i]
		}
	}
	if smaller == nil || smaller.RequestBytes != 40<<30 || smaller.Node != node.Name {
		t.Errorf("smaller request %+v, want 40Gi on %s", smaller, node.Name)
	}
	if leave == nil || leave.Node != node.Name || len(leave.Pods) != 1 {
		t.Fatalf("after-leaving suggestion %+v, want one pod on %s", leave, node.Name)
	}

	// The text form says the same for people.
	text := runWhyText(t, cp.Kubeconfig, "frag", "-n", e.ns)
	t.Logf("the scheduler: %s\nkubectl gpufrac why frag:\n%s", schedulerSays, text)
	for _, want := range []string{"Fragmented", "What would make it fit", leave.Message} {
		if !strings.Contains(text, want) {
			t.Errorf("why's text lacks %q:\n%s", want, text)
		}
	}

	// A namespace-only user: same reason, and told what it could not see.
	limited := limitedKubeconfig(t, e)
	got = runWhy(t, limited, "frag", "-n", e.ns, "-o", "json")
	if v := nodeVerdict(t, got, node.Name); len(v.Reasons) == 0 || v.Reasons[0].Code != why.Fragmented {
		t.Errorf("limited user: node %s verdict %+v, want Fragmented", node.Name, v)
	}
	unseen := strings.Join(got.Unseen, "\n")
	for _, want := range []string{"resourceclaims outside namespace " + e.ns, "nodes (cannot list)"} {
		if !strings.Contains(unseen, want) {
			t.Errorf("limited user was not told about %q; unseen: %v", want, got.Unseen)
		}
	}

	// The suggestion holds in the real scheduler: once the named pod
	// leaves, frag lands on the GPU why named.
	e.deletePod(strings.TrimPrefix(leave.Pods[0], e.ns+"/"))
	e.poll("pod frag to be scheduled", func() (bool, error) { return e.pod("frag").Spec.NodeName != "", nil })
	claim := e.claimOf(e.pod("frag"))
	e.poll("the allocation of frag's claim", func() (bool, error) {
		claim = e.claimOf(e.pod("frag"))
		return claim.Status.Allocation != nil, nil
	})
	if d := claim.Status.Allocation.Devices.Results[0].Device; d != leave.Device {
		t.Errorf("frag landed on %s, why said %s", d, leave.Device)
	}
}

// TestWhyGivesTheNodesRefusal: on an older-driver node (memoryEnforcement
// mps) the scheduler places a TimeSlicing claim with a limit above its
// request, and the node's plugin refuses to prepare it. why, replaying the
// plugin's planning over the node's published attributes, gives the same
// reason the plugin put in its PrepareFailed Event.
func TestWhyGivesTheNodesRefusal(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	node := e.nodeWith(harness.NodeOptions{GPUs: "h200x1", Enforcement: "mps"})
	class := e.classFor("refuse", "")
	e.createTemplate(claimTemplate("burst", class, "40Gi", 1, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\nmemoryLimit: 60Gi\ncomputeMode: TimeSlicing\n"))
	e.createPod("burst", "burst", node.Name)
	claim := e.claimOf(e.pod("burst"))
	var plugin string
	e.poll("the plugin's PrepareFailed Event on claim "+claim.Name, func() (bool, error) {
		list, err := e.client.EventsV1().Events(e.ns).List(e.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == "PrepareFailed" && ev.Regarding.Name == claim.Name {
				plugin = ev.Note
				return true, nil
			}
		}
		return false, nil
	})

	got := runWhy(t, cp.Kubeconfig, "burst", "-n", e.ns, "-o", "json")
	if len(got.Problems) != 1 || got.Problems[0].Code != why.NodeRefuses {
		t.Fatalf("why: problems %+v, want the node's refusal; summary %q", got.Problems, got.Summary)
	}
	msg := got.Problems[0].Message
	if !strings.Contains(msg, "memoryEnforcement mps") || !strings.Contains(plugin, msg) {
		t.Errorf("why says %q; the plugin said %q", msg, plugin)
	}
	if len(got.Shares) != 1 || got.Shares[0].Prepared || got.Shares[0].Node != node.Name {
		t.Errorf("shares %+v, want one unprepared share on %s", got.Shares, node.Name)
	}
}

func nodeVerdict(t *testing.T, e why.Explanation, node string) why.NodeResult {
	t.Helper()
	for _, n := range e.Nodes {
		if n.Node == node {
			return n
		}
	}
	t.Fatalf("why has no verdict for node %s: %+v", node, e.Nodes)
	return why.NodeResult{}
}

// runWhyText runs the kubectl-gpufrac binary, built without cgo as
// `make build-cli` builds it, against the control plane: the command as a
// user runs it, kubectl's flags (cli-runtime) included. (A binary, not the
// command tree in-process: cli-runtime links Go's plugin package, which
// makes the linker bind every symbol at start, and this test binary links
// go-nvml, whose NVML symbols resolve only lazily.)
func runWhyText(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kubectl-gpufrac")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, "./cmd/kubectl-gpufrac")
	build.Dir = filepath.Join("..", "..")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl-gpufrac with CGO_ENABLED=0: %v\n%s", err, out)
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"why", "--kubeconfig", kubeconfig}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl gpufrac why %v: %v\n%s", args, err, errOut.String())
	}
	return out.String()
}

func runWhy(t *testing.T, kubeconfig string, args ...string) why.Explanation {
	t.Helper()
	var e why.Explanation
	out := runWhyText(t, kubeconfig, args...)
	if err := json.Unmarshal([]byte(out), &e); err != nil {
		t.Fatalf("why -o json printed no JSON: %v\n%s", err, out)
	}
	return e
}

// limitedKubeconfig is the admin kubeconfig impersonating a user who may
// read pods, claims and templates of e's namespace and list slices and
// classes, but not claims cluster-wide nor nodes.
func limitedKubeconfig(t *testing.T, e *env) string {
	t.Helper()
	user := "why-user-" + e.ns
	rbac := e.client.RbacV1()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "why-reader"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list"}},
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims", "resourceclaimtemplates"}, Verbs: []string{"get", "list"}},
	}}
	if _, err := rbac.Roles(e.ns).Create(e.ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	if _, err := rbac.RoleBindings(e.ns).Create(e.ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "why-reader"},
		Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "why-reader"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterRole := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: user}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices", "deviceclasses"}, Verbs: []string{"get", "list"}},
	}}
	if _, err := rbac.ClusterRoles().Create(e.ctx, clusterRole, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(e.ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user},
		Subjects: subject, RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.WithoutCancel(e.ctx)
		_ = rbac.ClusterRoleBindings().Delete(ctx, user, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(ctx, user, metav1.DeleteOptions{})
	})
	cfg, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate = user
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
