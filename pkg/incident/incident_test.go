package incident_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/pkg/incident"
	"github.com/gpufrac/gpufrac/pkg/inventory"
	"github.com/gpufrac/gpufrac/pkg/plan"
)

var (
	app   = incident.Container{Namespace: "team", Pod: "llm-0", Container: "server"}
	share = incident.Share{ClaimNamespace: "team", ClaimName: "llm", ClaimUID: "uid-llm", Pool: "n1", Device: "gpu-0",
		ShareID: "s1", GPUUUID: "GPU-0", SoftBytes: 40 << 30, HardBytes: 60 << 30}
)

func sample(used int64) incident.Sample {
	return incident.Sample{Container: app, Share: share, UsedBytes: used, Time: time.Unix(100, 0)}
}

type transition struct {
	kind   incident.Kind
	active bool
}

// TestDetector: each incident starts once when its zone is entered and
// ends once when left (NVIDIA's zones: 0..soft guaranteed, soft..hard
// borrowing, at hard out-of-memory), whatever the number of scrapes.
func TestDetector(t *testing.T) {
	steps := []struct {
		name    string
		samples []incident.Sample
		want    []transition
	}{
		{"within the request", []incident.Sample{sample(40 << 30)}, nil},
		{"above the request", []incident.Sample{sample(41 << 30)}, []transition{{incident.Borrowing, true}}},
		{"still above: nothing new", []incident.Sample{sample(50 << 30)}, nil},
		{"more than 1% (614Mi) under the hard limit", []incident.Sample{sample(60<<30 - 700<<20)}, nil},
		{"within 1% of the hard limit", []incident.Sample{sample(60<<30 - 600<<20)}, []transition{{incident.AtHardLimit, true}}},
		{"back under the limit, still borrowing", []incident.Sample{sample(55 << 30)}, []transition{{incident.AtHardLimit, false}}},
		{"back within the request", []incident.Sample{sample(10 << 30)}, []transition{{incident.Borrowing, false}}},
		{"borrowing again", []incident.Sample{sample(45 << 30)}, []transition{{incident.Borrowing, true}}},
		{"the container is gone: forgotten without a transition", nil, nil},
		{"a new container borrowing starts anew", []incident.Sample{sample(45 << 30)}, []transition{{incident.Borrowing, true}}},
	}
	d := incident.NewDetector()
	for _, s := range steps {
		got := d.Observe("n1", s.samples)
		var tr []transition
		for _, i := range got {
			tr = append(tr, transition{i.Kind, i.Active})
			if i.Node != "n1" || i.Share != share || i.Container != app {
				t.Errorf("%s: incident %+v names the wrong node, share or container", s.name, i)
			}
		}
		if len(tr) != len(s.want) {
			t.Fatalf("%s: transitions %v, want %v", s.name, tr, s.want)
		}
		for i := range tr {
			if tr[i] != s.want[i] {
				t.Errorf("%s: transitions %v, want %v", s.name, tr, s.want)
			}
		}
	}
}

// TestAtHardLimitBand: under a small limit one 256Mi allocation is more
// than 1% of it, and a container that cannot get one more is at its limit.
func TestAtHardLimitBand(t *testing.T) {
	small := share
	small.SoftBytes, small.HardBytes = 4<<30, 6<<30
	for _, tc := range []struct {
		used int64
		want bool
	}{{6<<30 - 300<<20, false}, {6<<30 - 256<<20, true}} {
		got := incident.NewDetector().Observe("n1", []incident.Sample{{Container: app, Share: small, UsedBytes: tc.used}})
		at := false
		for _, i := range got {
			at = at || i.Kind == incident.AtHardLimit
		}
		if at != tc.want {
			t.Errorf("%d MiB used of 6Gi: at the hard limit %v, want %v", tc.used>>20, at, tc.want)
		}
	}
}

func TestMessages(t *testing.T) {
	neighbour := share
	neighbour.ClaimName, neighbour.SoftBytes = "batch", 80<<30
	for _, tc := range []struct {
		inc  incident.Incident
		want []string
	}{
		{incident.Incident{Kind: incident.AtHardLimit, Active: true, Container: app, Share: share, UsedBytes: 60 << 30},
			[]string{"container server of pod team/llm-0 uses 60Gi of its 60Gi hard limit on GPU GPU-0 (n1/gpu-0)", "claim team/llm", "out-of-memory"}},
		{incident.Incident{Kind: incident.Borrowing, Active: true, Container: app, Share: share, UsedBytes: 50 << 30},
			[]string{"uses 50Gi, above its 40Gi request", "MPS may evict it"}},
		{incident.Incident{Kind: incident.MPSEvicted, Active: true, Container: app, Share: share, Neighbour: &neighbour, Detail: "pid 42"},
			[]string{"MPS terminated container server of pod team/llm-0", "more than its 40Gi request", "when claim team/batch, within its 80Gi request, needed the memory: pid 42"}},
		{incident.Incident{Kind: incident.MPSTerminated, Active: true, Share: share},
			[]string{"MPS terminated a client on GPU GPU-0"}},
		{incident.Incident{Kind: incident.Borrowing, Container: app, Share: share}, []string{"no longer above its request"}},
	} {
		msg := tc.inc.Message()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s message %q lacks %q", tc.inc.Kind, msg, w)
			}
		}
	}
}

// TestFromMPS: the MPS namespace of a termination names the claim
// (plan.MPSNamespaceFor), and the requester's names the neighbour.
func TestFromMPS(t *testing.T) {
	gpu := inventory.GPU{UUID: "GPU-0", Index: 0}
	mk := func(name string, soft, hard int64) plan.Claim {
		uid := types.UID("uid-" + name)
		b := plan.MPSBindingFor("/run/mps", gpu.UUID)
		b.Version, b.Namespace = inventory.MPSVersionV3, plan.MPSNamespaceFor(uid)
		return plan.Claim{UID: uid, Namespace: "team", Name: name, Devices: []plan.Device{{Pool: "n1", Device: "gpu-0", GPU: gpu,
			SoftLimitBytes: soft, HardLimitBytes: hard, ComputeMode: "SMSharing", MPS: b}}}
	}
	prepared := []plan.Claim{mk("borrower", 20<<30, 60<<30), mk("owner", 80<<30, 80<<30)}
	ev := incident.MPSEvent{GPUUUID: "GPU-0", Namespace: plan.MPSNamespaceFor("uid-borrower"), PID: 7, Evicted: true,
		RequesterNamespace: plan.MPSNamespaceFor("uid-owner"), RequesterPID: 8, Time: time.Unix(5, 0)}
	inc, ok := incident.FromMPS("n1", ev, prepared, func(gpu string, pid int) (incident.Container, bool) {
		return incident.Container{Namespace: "team", Pod: "borrower-0", Container: "c"}, gpu == "GPU-0" && pid == 7
	})
	if !ok || inc.Kind != incident.MPSEvicted || inc.Share.ClaimName != "borrower" || inc.Neighbour == nil || inc.Neighbour.ClaimName != "owner" ||
		inc.Container.Pod != "borrower-0" || !inc.Active {
		t.Errorf("incident %+v (ok %v), want borrower evicted for owner", inc, ok)
	}
	ev.Evicted, ev.RequesterNamespace = false, ""
	if inc, ok := incident.FromMPS("n1", ev, prepared, nil); !ok || inc.Kind != incident.MPSTerminated || inc.Neighbour != nil || inc.Container.Pod != "" {
		t.Errorf("plain termination %+v", inc)
	}
	ev.Namespace = "cunknown"
	if _, ok := incident.FromMPS("n1", ev, prepared, nil); ok {
		t.Error("a namespace of no prepared claim became an incident")
	}
}
