// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package mps

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/hook/record"
	"github.com/gpufrac/gpufrac/internal/node/incident"
)

// The daemon's log, in the double's (inferred) format, becomes one
// incident.MPSEvent per evicted, terminated or refused client of a known
// claim: the
// victim by the container ID that ends its cgroup (cgroupfs and systemd
// spellings) and the hook's record of it, the neighbour by its own cgroup;
// each line once, nothing for gpufrac's own terminations, a client of no
// known claim, another GPU's line or a partial last line; nothing read
// before WatchTerminations is lost.
func TestTerminationsReachTheVictimsClaim(t *testing.T) {
	dir := t.TempDir()
	logDir, records := filepath.Join(dir, "log"), filepath.Join(dir, "containers")
	for _, rec := range []struct{ uid, id, pod string }{{"uid-a", "aaaa1111", "pod-a"}, {"uid-b", "bbbb2222", "pod-b"}, {"uid-c", "cccc3333", "pod-c"}} {
		path := record.Path(records, rec.uid, rec.id)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(record.Record{ClaimUID: rec.uid, Namespace: "team", Pod: rec.pod, Container: "main"})
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &Manager{cfg: Config{RecordDir: records}, logOffsets: map[string]int64{}, users: map[string]users{
		"GPU-a": {
			types.UID("uid-a"): {claim: plan.Claim{UID: "uid-a", Namespace: "team", Name: "a"}},
			types.UID("uid-b"): {claim: plan.Claim{UID: "uid-b", Namespace: "team", Name: "b"}},
			types.UID("uid-c"): {claim: plan.Claim{UID: "uid-c", Namespace: "team", Name: "c"}},
		},
	}}
	logf := filepath.Join(logDir, "control.log")
	appendLog := func(s string) {
		f, err := os.OpenFile(logf, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = f.WriteString(s)
		_ = f.Close()
	}
	var got []incident.MPSEvent
	logs := map[string]string{"GPU-a": logDir}
	scan := func() { m.scanEvictions(context.Background(), logs) }

	appendLog("[t] client connected: pid=7\n" +
		"[t] memacct: evicted client pid=7 cgroup=/kubepods/besteffort/podx/aaaa1111 device=GPU-a for pid 9 cgroup=/kubepods.slice/cri-containerd-bbbb2222.scope: used 92160MiB, soft limit 40960MiB\n" +
		"[t] client terminated: pid=7 cgroup=/kubepods/besteffort/podx/aaaa1111 device=GPU-a route=uid_0/default: evicted: it used 51200MiB above its soft limit\n")
	scan() // nobody listens yet: the lines wait
	m.WatchTerminations(func(ev incident.MPSEvent) { got = append(got, ev) })
	scan()
	scan()
	if len(got) != 1 {
		t.Fatalf("events %+v, want one eviction", got)
	}
	if ev := got[0]; !ev.Evicted || ev.ClaimUID != "uid-a" || ev.RequesterClaimUID != "uid-b" || ev.PID != 7 || ev.RequesterPID != 9 ||
		ev.Container != (incident.Container{Namespace: "team", Pod: "pod-a", Container: "main"}) || ev.Namespace != "" || ev.RequesterNamespace != "" ||
		!strings.Contains(ev.Detail, "used 92160MiB, soft limit 40960MiB") {
		t.Errorf("eviction %+v: want claim uid-a's pod-a evicted for claim uid-b", ev)
	}

	got = nil
	appendLog("[t] client terminated: pid=8 cgroup=/kubepods/podx/bbbb2222 device=GPU-a route=gpufrac/c01: namespace deleted\n" +
		"[t] client terminated: pid=8 cgroup=/kubepods/podx/bbbb2222 device=GPU-a route=gpufrac/c01: client terminate\n" +
		"[t] server: fatal GPU exception on device=GPU-a raised by pid=11 cgroup=/kubepods/podz/cccc3333\n" +
		"[t] client terminated: pid=8 cgroup=/kubepods/podx/bbbb2222 device=GPU-a route=gpufrac/c01: fatal GPU exception raised by pid 11\n" +
		"[t] client terminated: pid=12 cgroup=/x/unknown device=GPU-a route=gpufrac/c01: fatal GPU exception raised by pid 11\n" +
		"[t] client terminated: pid=13 cgroup=/kubepods/podx/bbbb2222 device=GPU-other route=gpufrac/c01: fatal GPU exception raised by pid 11\n" +
		"[t] memacct: evicted client pid=8 cgroup=/kubepods/podx/bbbb2222 device=GPU-a for pid 9: partial")
	scan()
	if len(got) != 1 {
		t.Fatalf("events %+v, want one termination (on claim b, for the fault of claim c)", got)
	}
	if ev := got[0]; ev.Evicted || ev.Refused || ev.ClaimUID != "uid-b" || ev.RequesterClaimUID != "uid-c" || ev.Container.Pod != "pod-b" ||
		!strings.Contains(ev.Detail, "pid 8 on MPS route gpufrac/c01: fatal GPU exception raised by pid 11") {
		t.Errorf("termination %+v", ev)
	}

	// The partial line, once complete, is read.
	got = nil
	appendLog("ly written\n")
	scan()
	if len(got) != 1 || !got[0].Evicted || got[0].ClaimUID != "uid-b" || !strings.Contains(got[0].Detail, "partially written") {
		t.Fatalf("events %+v, want the completed eviction line on claim b", got)
	}

	// A newcomer refused while a client the fault reached lingers.
	got = nil
	appendLog("[t] client refused: pid=14 cgroup=/kubepods/podx/aaaa1111 device=GPU-a: server not ready: waiting for the clients a fatal GPU exception ended to exit: pid=8 cgroup=/kubepods/podx/bbbb2222, pid=11 cgroup=/kubepods/podz/cccc3333\n")
	scan()
	if len(got) != 1 {
		t.Fatalf("events %+v, want one refusal", got)
	}
	if ev := got[0]; !ev.Refused || ev.Evicted || ev.ClaimUID != "uid-a" || ev.RequesterClaimUID != "uid-b" || ev.RequesterPID != 8 || ev.PID != 14 ||
		!strings.Contains(ev.Detail, "pid 14: server not ready") {
		t.Errorf("refusal %+v: want claim uid-a refused while claim uid-b's client lingers", ev)
	}
}
