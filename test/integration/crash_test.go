// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/hack/harness"
	"github.com/gpufrac/gpufrac/hack/kubebuild"
	"github.com/gpufrac/gpufrac/internal/node/cdispec"
	"github.com/gpufrac/gpufrac/internal/node/checkpoint"
	"github.com/gpufrac/gpufrac/internal/node/plugin"
)

// crashPoints are the preparer's failpoints (internal/node/preparer) and the status
// writer's (internal/node/claimstatus), with the phase in which each is reached.
var crashPoints = []struct{ name, phase string }{
	{"prepare-before-checkpoint-started", "prepare"},
	{"prepare-after-checkpoint-started", "prepare"},
	{"prepare-after-mps", "prepare"},
	{"prepare-after-cdi-write", "prepare"},
	{"prepare-after-checkpoint-completed", "prepare"},
	{"status-after-write", "prepare"},
	{"unprepare-before-rollback", "unprepare"},
	{"unprepare-after-rollback", "unprepare"},
}

// failpointFlag is the flag only -tags failpoints builds have.
const failpointFlag = "crash-at-failpoint"

// TestCrashAtEveryFailpoint kills the real plugin process with SIGKILL at
// each failpoint of Prepare and Unprepare, restarts it without the
// failpoint, lets the kubelet stand-in retry as the kubelet does, and
// checks that the node converges: CDI specs, checkpoint, claim status and
// MPS reference counts all agree with what the API server says is
// prepared, and nothing is left once the pods are gone.
func TestCrashAtEveryFailpoint(t *testing.T) {
	t.Parallel()
	root, err := kubebuild.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	if err := kubebuild.BuildPluginTags(context.Background(), kubebuild.NewProgress(nil), root, binDir, "failpoints"); err != nil {
		t.Fatalf("building the plugin with -tags failpoints: %v", err)
	}
	failBin := filepath.Join(binDir, "gpufrac-kubelet-plugin")
	t.Run("only the failpoints build can crash itself", func(t *testing.T) {
		for bin, want := range map[string]bool{cp.PluginBinary: false, failBin: true} {
			raw, err := os.ReadFile(bin)
			if err != nil {
				t.Fatal(err)
			}
			if got := bytes.Contains(raw, []byte(failpointFlag)); got != want {
				t.Errorf("%s contains %q: %v, want %v", bin, failpointFlag, got, want)
			}
		}
	})

	var converged atomic.Int32
	t.Run("points", func(t *testing.T) {
		for _, fp := range crashPoints {
			t.Run(fp.name, func(t *testing.T) {
				t.Parallel()
				crashAndConverge(t, failBin, fp.name, fp.phase)
				if !t.Failed() {
					converged.Add(1)
				}
			})
		}
	})
	t.Logf("%d crash points exercised with a real SIGKILL, %d converged", len(crashPoints), converged.Load())
}

// crashClaim is one claim of a crash test and what it should hold.
type crashClaim struct {
	pod   string
	claim *resourceapi.ResourceClaim
	sm    bool
}

func crashAndConverge(t *testing.T, bin, point, phase string) {
	e := newEnv(t)
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	metricsFlag := "--metrics-address=127.0.0.1:" + strconv.Itoa(port)
	node := e.nodeWith(harness.NodeOptions{
		GPUs: "h200x2", MPSImage: "gpufrac/mps-control-daemon:integration", PluginBinary: bin,
		PluginArgs: []string{"--" + failpointFlag + "=" + point, metricsFlag},
	})
	// One GPU per mode: TimeSlicing and SMSharing never share a GPU.
	ts := e.classFor("ts", `device.attributes["gpufrac.dev"].index == 0`)
	sm := e.classFor("sm", `device.attributes["gpufrac.dev"].index == 1`)
	e.createTemplate(claimTemplate("ts", ts, "20Gi", 1, ""))
	e.createTemplate(claimTemplate("sm", sm, "20Gi", 1, "apiVersion: gpufrac.dev/v1alpha1\nkind: FractionConfig\ncomputeMode: SMSharing\nmemoryLimit: 30Gi\n"))
	pods := map[string]bool{"ts-0": false, "sm-0": true, "sm-1": true}
	for name, isSM := range pods {
		tmpl := "ts"
		if isSM {
			tmpl = "sm"
		}
		e.createPod(name, tmpl, node.Name)
	}

	if phase == "prepare" {
		crashAndRestart(t, e, node, point, metricsFlag)
	}
	var claims []crashClaim
	for _, name := range slices.Sorted(maps.Keys(pods)) {
		pod := e.waitRunning(name)
		claims = append(claims, crashClaim{pod: name, claim: e.claimOf(pod), sm: pods[name]})
	}
	smGPU := stringAttr(e.device(node.Name, "gpu-1"), "uuid")
	e.poll("the node to converge with every claim prepared", func() (bool, error) {
		return true, e.converged(node, port, claims, claims, smGPU)
	})

	for name := range pods {
		if err := e.client.CoreV1().Pods(e.ns).Delete(e.ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatalf("deleting pod %s: %v", name, err)
		}
	}
	if phase == "unprepare" {
		crashAndRestart(t, e, node, point, metricsFlag)
	}
	e.poll("the node to converge with nothing prepared", func() (bool, error) {
		for name := range pods {
			if _, err := e.client.CoreV1().Pods(e.ns).Get(e.ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("pod %s is not gone yet (%v)", name, err)
			}
		}
		return true, e.converged(node, port, nil, claims, smGPU)
	})
}

// crashAndRestart waits until the plugin killed itself at point, then
// starts it again without the failpoint.
func crashAndRestart(t *testing.T, e *env, node *harness.Node, point, metricsFlag string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, waitTimeout)
	defer cancel()
	ws, err := node.WaitPluginExit(ctx)
	if err != nil {
		t.Fatalf("the plugin never reached failpoint %s: %v", point, err)
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the plugin exited with %v, want death by SIGKILL at failpoint %s", ws, point)
	}
	if log, _ := os.ReadFile(node.PluginLog()); !bytes.Contains(log, []byte("FAILPOINT "+point+" reached")) {
		t.Fatalf("the plugin was killed, but not at failpoint %s", point)
	}
	if err := node.RestartPlugin(e.ctx, "", metricsFlag); err != nil {
		t.Fatalf("restarting the plugin: %v", err)
	}
}

// converged returns why the node does not agree with want (the claims that
// should be prepared) yet; all are every claim of the test.
func (e *env) converged(node *harness.Node, port int, want, all []crashClaim, smGPU string) error {
	var errs []error
	wantUIDs := map[types.UID]bool{}
	wantMPS, wantTS := 0, 0
	for _, c := range want {
		wantUIDs[c.claim.UID] = true
		if c.sm {
			wantMPS++
		} else {
			wantTS++
		}
	}

	// CDI: exactly one spec per prepared claim, no orphan.
	entries, err := os.ReadDir(node.CDIRoot)
	if err != nil {
		return err
	}
	var specs, wantSpecs []string
	for _, en := range entries {
		specs = append(specs, en.Name())
	}
	for uid := range wantUIDs {
		wantSpecs = append(wantSpecs, cdispec.SpecName(uid))
	}
	slices.Sort(wantSpecs)
	if !slices.Equal(specs, wantSpecs) {
		errs = append(errs, fmt.Errorf("CDI specs %v, want %v", specs, wantSpecs))
	}

	// Checkpoint: exactly the prepared claims, each Completed.
	ckpt := map[types.UID]checkpoint.Entry{}
	raw, err := os.ReadFile(filepath.Join(node.PluginDataDir, plugin.CheckpointFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		d, err := checkpoint.Decode(raw)
		if err != nil {
			return err
		}
		ckpt = d.Claims
	}
	if !maps.EqualFunc(ckpt, wantUIDs, func(en checkpoint.Entry, _ bool) bool { return en.State == checkpoint.Completed }) {
		got := map[types.UID]checkpoint.State{}
		for uid, en := range ckpt {
			got[uid] = en.State
		}
		errs = append(errs, fmt.Errorf("checkpoint %v, want %v Completed", got, slices.Collect(maps.Keys(wantUIDs))))
	}

	// Claim status: Ready entries of this driver exactly for prepared claims.
	for _, c := range all {
		claim, err := e.client.ResourceV1().ResourceClaims(c.claim.Namespace).Get(e.ctx, c.claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) && !wantUIDs[c.claim.UID] {
			continue
		}
		if err != nil {
			return err
		}
		if claim.UID != c.claim.UID {
			continue
		}
		ours := slices.DeleteFunc(slices.Clone(claim.Status.Devices), func(d resourceapi.AllocatedDeviceStatus) bool { return d.Driver != driver })
		switch {
		case wantUIDs[claim.UID] && (claim.Status.Allocation == nil || len(ours) != len(claim.Status.Allocation.Devices.Results)):
			errs = append(errs, fmt.Errorf("claim %s (pod %s): %d status.devices entries of %s, want one per allocated device", claim.Name, c.pod, len(ours), driver))
		case !wantUIDs[claim.UID] && len(ours) > 0:
			errs = append(errs, fmt.Errorf("claim %s (pod %s) is unprepared but keeps %d status.devices entries of %s", claim.Name, c.pod, len(ours), driver))
		}
	}

	// MPS: a daemon's reference count is the number of prepared claims
	// on its GPU (the node is r615 with per-cgroup limits, so TimeSlicing
	// claims are MPS clients too, on the other GPU), and a GPU's daemon
	// Pod runs exactly while its count is not 0.
	refs, err := mpsReferences(port)
	if err != nil {
		return err
	}
	wantRefs := map[string]int{}
	if wantMPS > 0 {
		wantRefs[smGPU] = wantMPS
	}
	if wantTS > 0 {
		tsGPU := "the TimeSlicing GPU"
		for g := range refs {
			if g != smGPU {
				tsGPU = g
			}
		}
		wantRefs[tsGPU] = wantTS
	}
	if !maps.Equal(refs, wantRefs) {
		errs = append(errs, fmt.Errorf("MPS reference counts %v, want %v", refs, wantRefs))
	}
	daemons, err := e.client.CoreV1().Pods(harness.MPSNamespace).List(e.ctx, metav1.ListOptions{LabelSelector: "gpufrac.dev/node=" + node.Name})
	if err != nil {
		return err
	}
	live := slices.DeleteFunc(daemons.Items, func(p v1.Pod) bool { return p.DeletionTimestamp != nil })
	if wantDaemons := len(wantRefs); len(daemons.Items) != wantDaemons || len(live) != wantDaemons {
		errs = append(errs, fmt.Errorf("%d MPS daemon Pods (%d not terminating), want %d", len(daemons.Items), len(live), wantDaemons))
	}
	return errors.Join(errs...)
}

// mpsReferences scrapes the plugin's gpufrac_mps_daemon_claims.
func mpsReferences(port int) (map[string]int, error) {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(port) + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping the plugin's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("reading the plugin's metrics: %w", err)
	}
	out := map[string]int{}
	for line := range strings.SplitSeq(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, "gpufrac_mps_daemon_claims{")
		if !ok {
			continue
		}
		_, afterUUID, _ := strings.Cut(rest, `gpu_uuid="`)
		uuid, _, _ := strings.Cut(afterUUID, `"`)
		_, value, _ := strings.Cut(rest, "} ")
		n, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %q: %w", line, err)
		}
		out[uuid] = int(n)
	}
	return out, nil
}
