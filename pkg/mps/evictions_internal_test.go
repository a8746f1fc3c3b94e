package mps

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/pkg/cdihook"
	"github.com/gpufrac/gpufrac/pkg/plan"
)

type evictions struct{ got []string }

func (e *evictions) DaemonRestarted(*plan.Claim, string) {}
func (e *evictions) DaemonRecovered(*plan.Claim)         {}
func (e *evictions) Evicted(c *plan.Claim, reason string) {
	e.got = append(e.got, c.Name+": "+reason)
}

// An eviction in a daemon's log reaches the claim whose container the
// victim was, once, by the container ID that ends the victim's cgroup
// (cgroupfs and systemd spellings).
func TestEvictionsReachTheVictimsClaim(t *testing.T) {
	dir := t.TempDir()
	logDir, records := filepath.Join(dir, "log"), filepath.Join(dir, "containers")
	for _, rec := range []struct{ uid, id string }{{"uid-a", "aaaa1111"}, {"uid-b", "bbbb2222"}} {
		path := cdihook.RecordPath(records, rec.uid, rec.id)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(`{}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ev := &evictions{}
	m := &Manager{cfg: Config{Events: ev, RecordDir: records}, logOffsets: map[string]int64{}, users: map[string]users{
		"GPU-a": {
			types.UID("uid-a"): {claim: plan.Claim{UID: "uid-a", Namespace: "team", Name: "a"}},
			types.UID("uid-b"): {claim: plan.Claim{UID: "uid-b", Namespace: "team", Name: "b"}},
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
	appendLog("[t] client connected: pid=7\n[t] memacct: evicted client pid=7 cgroup=/kubepods/besteffort/podx/aaaa1111 device=GPU-a for pid 9: used 92160MiB, soft limit 40960MiB\n")
	logs := map[string]string{"GPU-a": logDir}
	m.scanEvictions(context.Background(), logs)
	m.scanEvictions(context.Background(), logs)
	if len(ev.got) != 1 || !strings.HasPrefix(ev.got[0], "a: MPS evicted this claim's process 7 on GPU GPU-a: used 92160MiB, soft limit 40960MiB") {
		t.Fatalf("events %q, want one on claim a", ev.got)
	}
	appendLog("[t] memacct: evicted client pid=8 cgroup=/kubepods.slice/cri-containerd-bbbb2222.scope device=GPU-a for pid 9: used 1MiB, soft limit 0MiB\n[t] memacct: evicted client pid=8 cgroup=/x/unknown device=GPU-a for pid 9: partial")
	m.scanEvictions(context.Background(), logs)
	if len(ev.got) != 2 || !strings.HasPrefix(ev.got[1], "b: ") {
		t.Fatalf("events %q, want a second one on claim b (and nothing for an unknown cgroup or a partial line)", ev.got)
	}
}
