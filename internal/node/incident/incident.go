// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package incident turns what the node can observe about a share's GPU
// memory into incidents a person can see: a Warning Event on the claim and
// on the pod naming the GPU (and, for an MPS eviction, the neighbour whose
// request caused it), a condition in the claim's status.devices, and a
// Prometheus counter.
//
// The detection is a pure core: Detector turns per-container samples
// (NVML's per-cgroup soft limit, hard limit and current use, as the plugin
// reads them for its metrics) into transitions, and FromMPS turns an MPS
// server's report of a terminated client into an incident. Emitter is the
// edge that writes them. Sources and thresholds, and which of them NVIDIA
// documents, are in docs/incidents.md.
package incident

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
)

// Kind is what happened; it is the Event reason, the condition type and
// the counter's kind label.
type Kind string

const (
	// AtHardLimit means a container's GPU memory in use reached its hard limit;
	// its next allocation fails with out-of-memory (NVIDIA's FAILURE zone).
	AtHardLimit Kind = "GPUMemoryAtHardLimit"
	// Borrowing means a container uses more than its guaranteed request
	// (NVIDIA's PRESSURE zone): MPS may evict it when a neighbour within
	// its own request needs the memory.
	Borrowing Kind = "GPUMemoryBorrowing"
	// MPSEvicted means the MPS server terminated a client that was above its
	// request because a neighbour within its request needed the memory.
	MPSEvicted Kind = "MPSClientEvicted"
	// MPSTerminated means the MPS server terminated a client for another
	// reason (a fatal GPU exception of a client of the same GPU).
	MPSTerminated Kind = "MPSClientTerminated"
	// MPSWedged means the MPS server refused a new client because the GPU
	// waits for clients a fatal GPU exception ended to exit, and one of
	// them (the neighbour) has not: the GPU is wedged for newcomers.
	MPSWedged Kind = "MPSClientWedged"
)

// Kinds are all kinds, for pre-creating counter series.
var Kinds = []Kind{AtHardLimit, Borrowing, MPSEvicted, MPSTerminated, MPSWedged}

// Container names a container of a pod.
type Container struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// Share is one allocated share of a claim on a GPU.
type Share struct {
	ClaimNamespace string    `json:"claimNamespace"`
	ClaimName      string    `json:"claimName"`
	ClaimUID       types.UID `json:"claimUID"`
	Pool           string    `json:"pool"`
	Device         string    `json:"device"`
	ShareID        string    `json:"shareID,omitempty"`
	GPUUUID        string    `json:"gpuUUID"`
	SoftBytes      int64     `json:"softBytes"`
	HardBytes      int64     `json:"hardBytes"`
}

func (s Share) claim() string { return s.ClaimNamespace + "/" + s.ClaimName }

// Incident is one transition: Active when it starts, !Active when it ends
// (ends clear the condition; only starts make Events and count).
type Incident struct {
	Kind      Kind      `json:"kind"`
	Active    bool      `json:"active"`
	Node      string    `json:"node"`
	Container Container `json:"container"`
	Share     Share     `json:"share"`
	UsedBytes int64     `json:"usedBytes,omitempty"`
	// Neighbour is the share whose request caused an MPS eviction.
	Neighbour *Share    `json:"neighbour,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	Time      time.Time `json:"time"`
}

// Message is the one line for the Event and the condition.
func (i Incident) Message() string {
	c := i.Container
	who := "a client"
	if c.Pod != "" {
		who = fmt.Sprintf("container %s of pod %s/%s", c.Container, c.Namespace, c.Pod)
	}
	gpu := fmt.Sprintf("GPU %s (%s/%s)", i.Share.GPUUUID, i.Share.Pool, i.Share.Device)
	switch {
	case i.Kind == AtHardLimit && i.Active:
		return fmt.Sprintf("%s uses %s of its %s hard limit on %s (claim %s): its next allocation fails with out-of-memory",
			who, q(i.UsedBytes), q(i.Share.HardBytes), gpu, i.Share.claim())
	case i.Kind == Borrowing && i.Active:
		return fmt.Sprintf("%s uses %s, above its %s request, on %s (claim %s): MPS may evict it when a neighbour within its request needs the memory",
			who, q(i.UsedBytes), q(i.Share.SoftBytes), gpu, i.Share.claim())
	case i.Kind == MPSEvicted:
		msg := fmt.Sprintf("MPS terminated %s on %s (claim %s) for using more than its %s request", who, gpu, i.Share.claim(), q(i.Share.SoftBytes))
		if n := i.Neighbour; n != nil {
			msg += fmt.Sprintf(" when claim %s, within its %s request, needed the memory", n.claim(), q(n.SoftBytes))
		}
		return msg + "; its next CUDA call returns CUDA_ERROR_MPS_CLIENT_TERMINATED" + detail(i.Detail)
	case i.Kind == MPSWedged:
		msg := fmt.Sprintf("MPS refused %s on %s (claim %s) with CUDA_ERROR_MPS_SERVER_NOT_READY: the GPU takes no new client until the clients a fatal GPU exception ended have exited",
			who, gpu, i.Share.claim())
		if n := i.Neighbour; n != nil {
			msg += fmt.Sprintf("; a client of claim %s has not", n.claim())
		}
		return msg + detail(i.Detail)
	case i.Kind == MPSTerminated:
		msg := fmt.Sprintf("MPS terminated %s on %s (claim %s)", who, gpu, i.Share.claim())
		if n := i.Neighbour; n != nil {
			msg += fmt.Sprintf(" because of claim %s", n.claim())
		}
		return msg + detail(i.Detail)
	default:
		return fmt.Sprintf("%s no longer %s on %s", who, map[Kind]string{AtHardLimit: "at its hard limit", Borrowing: "above its request"}[i.Kind], gpu)
	}
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

func q(bytes int64) string { return resource.NewQuantity(bytes, resource.BinarySI).String() }

// Sample is one container's GPU memory on one share at one time, as NVML
// reports it for the container's cgroup (nvmlDeviceGetMemoryLimits_v1:
// soft limit, hard limit, current use).
type Sample struct {
	Container Container
	Share     Share
	UsedBytes int64
	Time      time.Time
}

// Band is how close to its hard limit a container's use must be to count
// as at the limit: within Bytes, or Percent of the limit if that is more.
// NVML reports no per-cgroup "allocation refused" signal, and the driver
// refuses an allocation that would cross the limit, so a container at the
// wall stays under it by up to one allocation while every further one
// fails. The band must be at least the allocation the workloads make at
// the wall (docs/incidents.md says how the default was chosen and when to
// change it); the plugin's --hard-limit-band sets it.
type Band struct {
	Bytes   int64
	Percent int64
}

// DefaultBand is 256 MiB or 1% (inferred; test/gpu/run.sh prints what
// NVML reports at the wall).
var DefaultBand = Band{Bytes: 256 << 20, Percent: 1}

func (b Band) String() string {
	return q(b.Bytes) + "," + fmt.Sprint(b.Percent) + "%"
}

// ParseBand reads "<quantity>,<percent>%" ("256Mi,1%"); either part may
// be 0, not both.
func ParseBand(s string) (Band, error) {
	bytesPart, pctPart, ok := strings.Cut(s, ",")
	pctNum, isPct := strings.CutSuffix(strings.TrimSpace(pctPart), "%")
	if !ok || !isPct {
		return Band{}, fmt.Errorf("hard-limit band %q: want <quantity>,<percent>%% (e.g. 256Mi,1%%)", s)
	}
	// Bounded parse: a flag of "1E-999999999" must not stall the plugin's start.
	qty, err := v1alpha1.ParseQuantity(strings.TrimSpace(bytesPart))
	if err != nil || qty.Sign() < 0 {
		return Band{}, fmt.Errorf("hard-limit band %q: bytes %q must be a non-negative quantity (e.g. 256Mi)", s, bytesPart)
	}
	pct, err := strconv.ParseInt(pctNum, 10, 64)
	if err != nil || pct < 0 || pct > 50 {
		return Band{}, fmt.Errorf("hard-limit band %q: percent %q must be an integer from 0 to 50", s, pctNum)
	}
	// A band as large as the GPU would put every container at its limit;
	// past int64 Value() would wrap. The catalog's largest GPU bounds it.
	largest, _ := v1alpha1.CatalogLargestGPU()
	v, exact := qty.AsInt64()
	if !exact || v > largest.Value() {
		return Band{}, fmt.Errorf("hard-limit band %q: bytes %q must be a whole number of bytes of at most %s, the largest GPU in the catalog", s, bytesPart, largest.String())
	}
	b := Band{Bytes: v, Percent: pct}
	if b.Bytes == 0 && b.Percent == 0 {
		return Band{}, fmt.Errorf("hard-limit band %q: bytes and percent are both 0; a container could never be seen at its limit", s)
	}
	return b, nil
}

func (b Band) atHardLimit(used, hard int64) bool {
	return hard > 0 && hard-used <= max(hard/100*b.Percent, b.Bytes)
}

// Detector remembers which incidents are active so that each starts and
// ends once. It is owned by one goroutine.
type Detector struct {
	band   Band
	active map[detectorKey]bool
}

type detectorKey struct {
	container Container
	claim     types.UID
	gpu       string
	kind      Kind
}

// NewDetector starts with nothing active, with the default band.
func NewDetector() *Detector { return NewDetectorWithBand(DefaultBand) }

// NewDetectorWithBand uses band for the hard limit; the zero Band is the
// default.
func NewDetectorWithBand(band Band) *Detector {
	if band == (Band{}) {
		band = DefaultBand
	}
	return &Detector{band: band, active: map[detectorKey]bool{}}
}

// Observe takes the samples of one scrape and returns the transitions.
// A container absent from the samples (gone) ends its incidents silently:
// there is nobody left to tell, and the claim's condition goes with it.
func (d *Detector) Observe(node string, samples []Sample) []Incident {
	var out []Incident
	seen := map[detectorKey]bool{}
	for _, s := range samples {
		state := map[Kind]bool{
			Borrowing:   s.Share.SoftBytes > 0 && s.UsedBytes > s.Share.SoftBytes,
			AtHardLimit: d.band.atHardLimit(s.UsedBytes, s.Share.HardBytes),
		}
		for _, kind := range []Kind{AtHardLimit, Borrowing} {
			k := detectorKey{s.Container, s.Share.ClaimUID, s.Share.GPUUUID, kind}
			seen[k] = true
			if state[kind] == d.active[k] {
				continue
			}
			if state[kind] {
				d.active[k] = true
			} else {
				delete(d.active, k)
			}
			out = append(out, Incident{Kind: kind, Active: state[kind], Node: node, Container: s.Container, Share: s.Share, UsedBytes: s.UsedBytes, Time: s.Time})
		}
	}
	for k := range d.active {
		if !seen[k] {
			delete(d.active, k)
		}
	}
	return out
}
