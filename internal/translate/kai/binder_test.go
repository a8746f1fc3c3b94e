// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kai_test

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/translate/kai"
	"github.com/gpufrac/gpufrac/internal/translate/translated"
)

// TestKAIBinderRoundsThePortion pins, for an 81559 MiB GPU (an 80 GB H100:
// NVML's total, KAI's node label nvidia.com/gpu.memory) with KAI's reserve
// 0, the figures read from KAI's code: the scheduler hands the binder
// fmt.Sprintf("%.2f", portion) (createBindRequest), the binder takes
// uint64(usable MiB x received portion) (setNvFractionsMemoryAnnotation)
// and refuses a received portion not above 0 ("invalid received gpu
// portion"), the compute portion is the received one
// (resolveComputePortion), and a portion limit is read unrounded from the
// pod (setGpuMemoryPortionLimitAnnotation). The slice publishes that GPU
// as 81408Mi (the total rounded down to the 256Mi step, no MPS daemon);
// the claim asks KAI's figure rounded up to the step, and the whole
// capacity where that does not fit.
func TestKAIBinderRoundsThePortion(t *testing.T) {
	capacity := resource.MustParse("81408Mi")
	opts := kai.Options{GPUMemorySizes: []resource.Quantity{capacity}, GPUTotalsMiB: map[int64]int64{capacity.Value(): 81559}}
	const label = "memory request, 81408Mi GPU (81559 MiB total)"
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		kaiCell     string // Compare's KAI side (the Theirs column) for the memory request
		claim       string // what the claim asks
		limit       string // the claim's memoryLimit, "" for none
		percent     int32  // the SM cap, 0 for none
		note        string // a substring of the rounding note
		received    string // the portion KAI's binder receives
	}{
		{"0.335 is received as 0.34: 27730 MiB, not 27322", map[string]string{"gpu-fraction": "0.335"},
			"27730Mi", "27904Mi", "", 0, "KAI 27730Mi, the API server allocates 27904Mi (min 1Gi, step 256Mi)", "0.34"},
		{"0.125 is received as 0.12 (%.2f rounds the exact binary value half to even): 9787 MiB and 12%",
			map[string]string{"gpu-fraction": "0.125", "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"},
			"9787Mi", "9984Mi", "", 12, "KAI 9787Mi", "0.12"},
		{"0.333 is received as 0.33: 26914 MiB", map[string]string{"gpu-fraction": "0.333"},
			"26914Mi", "27136Mi", "", 0, "KAI 26914Mi", "0.33"},
		{"0.999 is received as 1.00: the whole GPU, more than the capacity", map[string]string{"gpu-fraction": "0.999"},
			"81559Mi", "81408Mi", "", 0, "KAI 81559Mi, more than this GPU's capacity 81408Mi: the claim asks the whole capacity, 151Mi less than KAI", "1.00"},
		{"a 0.9 portion limit beside 0.5: the limit from the unrounded value, 73403 MiB",
			map[string]string{"gpu-fraction": "0.5", "kai.scheduler/container.main.gpu-memory.portion.limit": "0.9"},
			"40779Mi", "40Gi", "73403Mi", 0, "KAI 40779Mi", "0.50"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(tc.annotations, "main")
			res, err := kai.Translate(p, opts)
			if err != nil {
				t.Fatal(err)
			}
			sub := res.Template.Spec.Spec.Devices.Requests[0].FirstAvailable
			if len(sub) != 1 {
				t.Fatalf("%d alternatives, want 1", len(sub))
			}
			if got := sub[0].Capacity.Requests["memory"]; got.String() != tc.claim {
				t.Errorf("the claim asks %s, want %s", got.String(), tc.claim)
			}
			var cfg v1alpha1.FractionConfig
			for _, c := range res.Template.Spec.Spec.Devices.Config {
				if err := json.Unmarshal(c.Opaque.Parameters.Raw, &cfg); err != nil {
					t.Fatal(err)
				}
			}
			gotLimit, gotPercent := "", int32(0)
			if cfg.MemoryLimit != nil {
				gotLimit = cfg.MemoryLimit.String()
			}
			if cfg.ActiveThreadPercentage != nil {
				gotPercent = *cfg.ActiveThreadPercentage
			}
			if gotLimit != tc.limit || gotPercent != tc.percent {
				t.Errorf("limit %q, SM cap %d%%; want %q, %d%%", gotLimit, gotPercent, tc.limit, tc.percent)
			}
			if note := res.Template.Annotations[kai.AnnotationRounding]; !strings.Contains(note, tc.note) {
				t.Errorf("rounding note %q, want it to say %q", note, tc.note)
			}
			rows := kai.Compare(p, opts)
			if cell := compareCell(rows, label); cell != tc.kaiCell {
				t.Errorf("translate's KAI column %q, want %q", cell, tc.kaiCell)
			}
			received := tc.annotations["gpu-fraction"]
			if cell := compareCell(rows, "portion KAI's binder receives (%.2f)"); cell != tc.received {
				t.Errorf("translate says KAI's binder receives %q, want %q (from %s)", cell, tc.received, received)
			}
		})
	}
	t.Run("0.004 is received as 0.00: refused with KAI's binder's reason", func(t *testing.T) {
		p := pod(map[string]string{"gpu-fraction": "0.004"}, "main")
		_, err := kai.Translate(p, opts)
		if err == nil || !strings.Contains(err.Error(), `invalid received gpu portion "0.00"`) {
			t.Fatalf("got %v, want the binder's refusal", err)
		}
		rows := kai.Compare(p, opts)
		if len(rows) == 0 || !strings.Contains(rows[0].Theirs, "invalid received gpu portion") || !strings.Contains(rows[0].Gpufrac, "refused") {
			t.Errorf("translate's admission row %+v", rows)
		}
	})
	t.Run("0.005 is received as 0.01 (its binary value is above the half): 815 MiB", func(t *testing.T) {
		res, err := kai.Translate(pod(map[string]string{"gpu-fraction": "0.005"}, "main"), opts)
		if err != nil {
			t.Fatal(err)
		}
		if note := res.Template.Annotations[kai.AnnotationRounding]; !strings.Contains(note, "KAI 815Mi, the API server allocates 1Gi") {
			t.Errorf("rounding note %q", note)
		}
	})
}

// TestTheAPIServerMinimumIsReported: what translate and the rounding note
// say gpufrac allocates is what the API server allocates, the slice's
// minimum included, for exact requests too.
func TestTheAPIServerMinimumIsReported(t *testing.T) {
	for _, tc := range []struct{ request, want string }{
		{"512Mi", "1Gi (the API server rounds 512Mi up to min 1Gi, step 256Mi)"},
		{"100m", "1Gi (the API server rounds 100m up to min 1Gi, step 256Mi)"},
		{"20000Mi", "20224Mi (the API server rounds 20000Mi up to min 1Gi, step 256Mi)"},
		{"2Gi", "2Gi"},
	} {
		p := pod(map[string]string{"nvidia.com/container.main.gpu-memory.request": tc.request}, "main")
		rows := kai.Compare(p, kai.Options{GPUMemorySizes: sizes})
		if cell := compareCell(rows, "memory request, any GPU"); cell != tc.request {
			t.Errorf("%s: KAI column %q, want the request itself", tc.request, cell)
		}
		got := ""
		for _, r := range rows {
			if r.Aspect == "memory request, any GPU" {
				got = r.Gpufrac
			}
		}
		if got != tc.want {
			t.Errorf("%s: gpufrac column %q, want %q", tc.request, got, tc.want)
		}
	}
}

// compareCell is the KAI side (Theirs) of the row named aspect, "" if absent.
func compareCell(rows []translated.Row, aspect string) string {
	for _, r := range rows {
		if r.Aspect == aspect {
			return r.Theirs
		}
	}
	return ""
}

// TestKAIBinderGrid compares every portion from 0.001 to 0.999 on three
// GPUs (an H100 without and with an MPS server reserve, an H200-sized
// total with KAI's reserve 512) against a model of KAI's code written
// here from its text: createBindRequest's %.2f, the binder's
// uint64(usable x received) and "invalid received gpu portion", and
// resolveComputePortion's received portion. The claim asks at least
// KAI's figure and less than a step more, or the whole capacity when
// KAI's figure is more; the SM cap is the received portion's percent.
func TestKAIBinderGrid(t *testing.T) {
	const step = int64(256) << 20
	for _, gpu := range []struct {
		capacity string
		totalMiB int64
		reserve  int64
	}{{"81408Mi", 81559, 0}, {"80384Mi", 81559, 0}, {"143104Mi", 143771, 512}} {
		capacity := resource.MustParse(gpu.capacity)
		opts := kai.Options{GPUMemorySizes: []resource.Quantity{capacity}, GPUTotalsMiB: map[int64]int64{capacity.Value(): gpu.totalMiB}, ReservedMiB: gpu.reserve}
		for i := 1; i <= 999; i++ {
			text := strconv.FormatFloat(float64(i)/1000, 'f', -1, 64)
			p := pod(map[string]string{"gpu-fraction": text, "nvidia.com/container.main.gpu-compute.mode": "sm-sharing"}, "main")
			res, err := kai.Translate(p, opts)
			portion, _ := strconv.ParseFloat(text, 64)
			received, _ := strconv.ParseFloat(fmt.Sprintf("%.2f", portion), 64)
			if received <= 0 {
				if err == nil || !strings.Contains(err.Error(), "invalid received gpu portion") {
					t.Errorf("%s on %s: %v, want the binder's refusal", text, gpu.capacity, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s on %s: %v", text, gpu.capacity, err)
			}
			kaiBytes := int64(uint64(float64(gpu.totalMiB-gpu.reserve)*received)) << 20
			sub := res.Template.Spec.Spec.Devices.Requests[0].FirstAvailable[0]
			got := sub.Capacity.Requests["memory"]
			switch {
			case kaiBytes > capacity.Value():
				if got.Cmp(capacity) != 0 {
					t.Errorf("%s on %s: claim %s, want the whole capacity (KAI %d bytes)", text, gpu.capacity, got.String(), kaiBytes)
				}
			case got.Value() < kaiBytes || got.Value() >= kaiBytes+step || got.Value()%step != 0:
				t.Errorf("%s on %s: claim %s, want KAI's %d bytes rounded up to the step", text, gpu.capacity, got.String(), kaiBytes)
			}
			var cfg v1alpha1.FractionConfig
			if err := json.Unmarshal(res.Template.Spec.Spec.Devices.Config[0].Opaque.Parameters.Raw, &cfg); err != nil {
				t.Fatal(err)
			}
			want := int32(max(1, min(100, math.Round(received*100))))
			if cfg.ActiveThreadPercentage == nil || *cfg.ActiveThreadPercentage != want {
				t.Errorf("%s on %s: SM cap %v, want %d%%", text, gpu.capacity, cfg.ActiveThreadPercentage, want)
			}
		}
	}
}
