// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package incident_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/internal/node/incident"
	"github.com/gpufrac/gpufrac/pkg/domain"
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
// than 1% of it, and a container that cannot get one more is at its limit;
// a configured band moves the line.
func TestAtHardLimitBand(t *testing.T) {
	small := share
	small.SoftBytes, small.HardBytes = 4<<30, 6<<30
	big := share // 60Gi hard
	for _, tc := range []struct {
		name string
		band incident.Band
		sh   incident.Share
		used int64
		want bool
	}{
		{"default, 300Mi left of 6Gi", incident.Band{}, small, 6<<30 - 300<<20, false},
		{"default, 256Mi left of 6Gi", incident.Band{}, small, 6<<30 - 256<<20, true},
		{"1Gi band, 1000Mi left of 6Gi", incident.Band{Bytes: 1 << 30}, small, 6<<30 - 1000<<20, true},
		{"5% of 60Gi is 3Gi: 2Gi left", incident.Band{Percent: 5}, big, 58 << 30, true},
		{"5% of 60Gi is 3Gi: 4Gi left", incident.Band{Percent: 5}, big, 56 << 30, false},
		{"no hard limit", incident.Band{}, incident.Share{SoftBytes: 1 << 30}, 80 << 30, false},
	} {
		got := incident.NewDetectorWithBand(tc.band).Observe("n1", []incident.Sample{{Container: app, Share: tc.sh, UsedBytes: tc.used}})
		at := false
		for _, i := range got {
			at = at || i.Kind == incident.AtHardLimit
		}
		if at != tc.want {
			t.Errorf("%s: at the hard limit %v, want %v", tc.name, at, tc.want)
		}
	}
}

func TestParseBand(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    incident.Band
		wantErr string
	}{
		{"256Mi,1%", incident.DefaultBand, ""},
		{" 1Gi , 0% ", incident.Band{Bytes: 1 << 30}, ""},
		{"0,2%", incident.Band{Percent: 2}, ""},
		{"256Mi", incident.Band{}, "want <quantity>,<percent>%"},
		{"256Mi,1", incident.Band{}, "want <quantity>,<percent>%"},
		{"lots,1%", incident.Band{}, `bytes "lots" must be a non-negative quantity`},
		{"-1Mi,1%", incident.Band{}, "must be a non-negative quantity"},
		{"256Mi,80%", incident.Band{}, `percent "80" must be an integer from 0 to 50`},
		{"0,0%", incident.Band{}, "both 0"},
		{"1E-999999999,1%", incident.Band{}, "must be a non-negative quantity"},
		{"1e30,1%", incident.Band{}, "must be a whole number of bytes of at most 180Gi"},
		{"500m,1%", incident.Band{}, "must be a whole number of bytes"},
	} {
		got, err := incident.ParseBand(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "hard-limit band") {
				t.Errorf("%q: error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if s := incident.DefaultBand.String(); s != "256Mi,1%" {
		t.Errorf("DefaultBand prints %q", s)
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
			[]string{"MPS terminated container server of pod team/llm-0", "more than its 40Gi request", "when claim team/batch, within its 80Gi request, needed the memory; its next CUDA call returns CUDA_ERROR_MPS_CLIENT_TERMINATED: pid 42"}},
		{incident.Incident{Kind: incident.MPSTerminated, Active: true, Share: share},
			[]string{"MPS terminated a client on GPU GPU-0"}},
		{incident.Incident{Kind: incident.MPSTerminated, Active: true, Container: app, Share: share, Neighbour: &neighbour, Detail: "fatal GPU exception raised by pid 11"},
			[]string{"MPS terminated container server of pod team/llm-0 on GPU GPU-0 (n1/gpu-0) (claim team/llm) because of claim team/batch: fatal GPU exception raised by pid 11"}},
		{incident.Incident{Kind: incident.MPSWedged, Active: true, Container: app, Share: share, Neighbour: &neighbour},
			[]string{"MPS refused container server of pod team/llm-0 on GPU GPU-0 (n1/gpu-0) (claim team/llm) with CUDA_ERROR_MPS_SERVER_NOT_READY", "a client of claim team/batch has not"}},
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

// TestFromMPS: an MPS termination names its victim's claim by claim UID
// (every client, TimeSlicing ones included, which have no MPS namespace)
// or by MPS namespace (mpslayout.NamespaceFor), and the neighbour the same
// way; the container comes from the event or from ContainerOf.
func TestFromMPS(t *testing.T) {
	gpu := domain.GPU{UUID: "GPU-0", Index: 0}
	mk := func(name string, mode v1alpha1.ComputeMode, soft, hard int64) plan.Claim {
		uid := types.UID("uid-" + name)
		b := mpslayout.For("/run/mps", gpu.UUID)
		b.Version = domain.MPSVersionV3
		if mode == "SMSharing" {
			b.Namespace = mpslayout.NamespaceFor(uid)
		}
		return plan.Claim{UID: uid, Namespace: "team", Name: name, Devices: []plan.Device{{Pool: "n1", Device: "gpu-0", GPU: gpu,
			SoftLimitBytes: soft, HardLimitBytes: hard, ComputeMode: mode, MPS: b}}}
	}
	prepared := []plan.Claim{mk("borrower", "SMSharing", 20<<30, 60<<30), mk("owner", "SMSharing", 80<<30, 80<<30),
		mk("ts-borrower", "TimeSlicing", 40<<30, 100<<30), mk("ts-owner", "TimeSlicing", 60<<30, 60<<30)}
	fromPID := func(gpu string, pid int) (incident.Container, bool) {
		return incident.Container{Namespace: "team", Pod: "borrower-0", Container: "c"}, gpu == "GPU-0" && pid == 7
	}
	for _, tc := range []struct {
		name          string
		ev            incident.MPSEvent
		wantOK        bool
		kind          incident.Kind
		claim, nb     string
		pod           string
		containerOfOK bool
	}{
		{"SMSharing eviction by namespace", incident.MPSEvent{Namespace: mpslayout.NamespaceFor("uid-borrower"), PID: 7, Evicted: true,
			RequesterNamespace: mpslayout.NamespaceFor("uid-owner")}, true, incident.MPSEvicted, "borrower", "owner", "borrower-0", true},
		{"TimeSlicing eviction by claim UID, container from the event", incident.MPSEvent{ClaimUID: "uid-ts-borrower", PID: 70, Evicted: true,
			RequesterClaimUID: "uid-ts-owner", Container: incident.Container{Namespace: "team", Pod: "a", Container: "main"}},
			true, incident.MPSEvicted, "ts-borrower", "ts-owner", "a", true},
		{"the claim UID wins over a namespace", incident.MPSEvent{ClaimUID: "uid-ts-borrower", Namespace: mpslayout.NamespaceFor("uid-borrower"), PID: 7},
			true, incident.MPSTerminated, "ts-borrower", "", "borrower-0", true},
		{"termination caused by a neighbour's fault", incident.MPSEvent{ClaimUID: "uid-ts-owner", PID: 71, RequesterClaimUID: "uid-borrower"},
			true, incident.MPSTerminated, "ts-owner", "borrower", "", true},
		{"plain termination, no container known", incident.MPSEvent{Namespace: mpslayout.NamespaceFor("uid-borrower"), PID: 7},
			true, incident.MPSTerminated, "borrower", "", "", false},
		{"a neighbour that is the victim itself is no neighbour", incident.MPSEvent{ClaimUID: "uid-owner", PID: 9, RequesterClaimUID: "uid-owner"},
			true, incident.MPSTerminated, "owner", "", "", true},
		{"refused while the neighbour's client lingers", incident.MPSEvent{ClaimUID: "uid-ts-owner", PID: 72, Refused: true, RequesterClaimUID: "uid-ts-borrower"},
			true, incident.MPSWedged, "ts-owner", "ts-borrower", "", true},
		{"a namespace of no prepared claim", incident.MPSEvent{Namespace: "cunknown", PID: 7}, false, "", "", "", "", true},
		{"a claim UID not prepared", incident.MPSEvent{ClaimUID: "uid-gone", PID: 7}, false, "", "", "", "", true},
		{"another GPU", incident.MPSEvent{GPUUUID: "GPU-1", ClaimUID: "uid-ts-borrower", PID: 7}, false, "", "", "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.ev.GPUUUID == "" {
				tc.ev.GPUUUID = "GPU-0"
			}
			var co incident.ContainerOf
			if tc.containerOfOK {
				co = fromPID
			}
			inc, ok := incident.FromMPS("n1", tc.ev, prepared, co)
			if ok != tc.wantOK {
				t.Fatalf("ok %v, want %v (%+v)", ok, tc.wantOK, inc)
			}
			if !ok {
				return
			}
			nb := ""
			if inc.Neighbour != nil {
				nb = inc.Neighbour.ClaimName
			}
			if inc.Kind != tc.kind || inc.Share.ClaimName != tc.claim || nb != tc.nb || inc.Container.Pod != tc.pod || !inc.Active ||
				inc.Node != "n1" || inc.Share.GPUUUID != "GPU-0" {
				t.Errorf("incident %+v (neighbour %q), want %s of %s for %q in pod %q", inc, nb, tc.kind, tc.claim, tc.nb, tc.pod)
			}
		})
	}
}
