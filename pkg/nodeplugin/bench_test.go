package nodeplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"

	"github.com/gpufrac/gpufrac/pkg/cdispec"
	"github.com/gpufrac/gpufrac/pkg/filewrite"
	"github.com/gpufrac/gpufrac/pkg/gpusim"
	"github.com/gpufrac/gpufrac/pkg/inventory"
	"github.com/gpufrac/gpufrac/pkg/nodeplugin"
)

// grpcBenchRound is how many claims are prepared before they are all
// unprepared again (at least the concurrency): a node's worth of pods, so
// the checkpoint holds what it would on a busy node, not b.N entries.
const grpcBenchRound = 32

// BenchmarkPrepareOverGRPC drives NodePrepareResources and
// NodeUnprepareResources through the plugin's real DRA socket, as the
// kubelet does, for TimeSlicing claims at concurrency 1, 8 and 64, in
// rounds: a round's claims are prepared, then unprepared. It reports, for
// Prepare and Unprepare apart, p50, p99 and claims per second, the file
// writes and fsyncs per claim (counted in the file-writing layer), and the
// durable-write floor measured in the same process on the same file
// system: one atomic, durable write of a small file (temp file, fsync,
// rename, directory fsync), what a driver that fsyncs one checkpoint write
// per claim pays at least. A table of every concurrency is printed at the
// end. The claims live in client-go's fake clientset, so API latency is
// not part of the figures (the side-by-side in docs/benchmarks.md has it).
func BenchmarkPrepareOverGRPC(b *testing.B) {
	results := map[int]grpcResult{}
	concs := []int{1, 8, 64}
	for _, conc := range concs {
		b.Run(fmt.Sprintf("concurrency-%d", conc), func(b *testing.B) { results[conc] = benchPrepare(b, conc) })
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nPrepare and Unprepare over the DRA socket (rounds of max(%d, concurrency) claims)\n", grpcBenchRound)
	fmt.Fprintf(&sb, "%-5s %-10s %9s %9s %9s %9s %9s %10s %11s %11s\n", "conc", "call", "p50-ms", "p99-ms", "claims/s", "writes/cl", "fsyncs/cl", "floor-ms", "p50/floor", "c/s vs c=1")
	for _, conc := range concs {
		r, ok := results[conc]
		if !ok {
			continue
		}
		for _, call := range []struct {
			name string
			s    grpcStats
			base grpcStats
		}{{"Prepare", r.prepare, results[1].prepare}, {"Unprepare", r.unprepare, results[1].unprepare}} {
			scale := "-"
			if call.base.claimsPerSec > 0 {
				scale = fmt.Sprintf("%.2fx", call.s.claimsPerSec/call.base.claimsPerSec)
			}
			fmt.Fprintf(&sb, "%-5d %-10s %9.2f %9.2f %9.0f %9.2f %9.2f %10.2f %11.2f %11s\n", conc, call.name,
				ms(call.s.p50), ms(call.s.p99), call.s.claimsPerSec, call.s.writesPerClaim, call.s.fsyncsPerClaim,
				ms(r.floorP50), float64(call.s.p50)/float64(r.floorP50), scale)
		}
	}
	fmt.Print(sb.String())
}

type grpcStats struct {
	p50, p99                       time.Duration
	claimsPerSec                   float64
	writesPerClaim, fsyncsPerClaim float64
}

type grpcResult struct {
	prepare, unprepare grpcStats
	floorP50           time.Duration
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchPrepare(b *testing.B, conc int) grpcResult {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The plain object tracker: NewClientset's field-managed tracker builds
	// a REST mapper on every call, half the CPU of this benchmark in its
	// profile (docs/benchmarks.md), stolen from the plugin on 2 cores. No
	// test here relies on managed fields.
	client := fake.NewSimpleClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	node, err := gpusim.NewNode("h200x8", nodeName, inventory.EnforcementDMem)
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	var counter filewrite.Counter
	cfg := nodeplugin.Config{
		NodeName: nodeName, KubeClient: client, NVML: node.NVML, InventoryOptions: node.InventoryOptions,
		PluginDataDir: filepath.Join(root, "p"), RegistrarDir: filepath.Join(root, "r"), CDIRoot: filepath.Join(root, "c"),
		CDI: cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode}, BootID: "b",
		Health:       nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
		WriteCounter: &counter,
	}
	plugin, err := nodeplugin.Start(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer plugin.Stop()
	conn := dialB(b, filepath.Join(cfg.RegistrarDir, "gpufrac.dev-reg.sock"))
	info, err := registerapi.NewRegistrationClient(conn).GetInfo(ctx, &registerapi.InfoRequest{})
	if err != nil {
		b.Fatal(err)
	}
	dra := drapb.NewDRAPluginClient(dialB(b, info.Endpoint))

	// Claims are created up front so the timed calls are the plugin's alone.
	n := b.N
	for i := range n {
		claim := allocatedClaim()
		claim.Name, claim.UID = fmt.Sprintf("c%d", i), types.UID(fmt.Sprintf("uid-%d", i))
		claim.Status.Allocation.Devices.Results[0].Device = fmt.Sprintf("gpu-%d", i%8)
		claim.Status.Allocation.Devices.Results[0].ShareID = ptrUID(fmt.Sprintf("s%d", i))
		if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	floorP50 := durableFloor(b, filepath.Join(root, "floor"), min(n, 100))
	round := max(grpcBenchRound, conc)
	prepLat, unprepLat := make([]time.Duration, n), make([]time.Duration, n)
	var prepTime, unprepTime time.Duration
	writes0, fsyncs0 := counter.Writes(), counter.Fsyncs() // the boot marker's
	b.ResetTimer()
	for first := 0; first < n; first += round {
		last := min(first+round, n)
		prepTime += fanOut(conc, first, last, func(i int) {
			ref := []*drapb.Claim{{Namespace: "default", Name: fmt.Sprintf("c%d", i), Uid: fmt.Sprintf("uid-%d", i)}}
			start := time.Now()
			resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
			prepLat[i] = time.Since(start)
			if err != nil || resp.Claims[ref[0].Uid].Error != "" {
				b.Errorf("prepare %d: %v %v", i, err, resp)
			}
		})
		unprepTime += fanOut(conc, first, last, func(i int) {
			ref := []*drapb.Claim{{Namespace: "default", Name: fmt.Sprintf("c%d", i), Uid: fmt.Sprintf("uid-%d", i)}}
			start := time.Now()
			resp, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref})
			unprepLat[i] = time.Since(start)
			if err != nil || resp.Claims[ref[0].Uid].Error != "" {
				b.Errorf("unprepare %d: %v %v", i, err, resp)
			}
		})
	}
	b.StopTimer()
	writes, fsyncs := float64(counter.Writes()-writes0)/float64(n), float64(counter.Fsyncs()-fsyncs0)/float64(n)
	res := grpcResult{prepare: stats(prepLat, prepTime), unprepare: stats(unprepLat, unprepTime), floorP50: floorP50}
	// Writes and fsyncs are per claim for Prepare and Unprepare together.
	res.prepare.writesPerClaim, res.prepare.fsyncsPerClaim = writes, fsyncs
	res.unprepare.writesPerClaim, res.unprepare.fsyncsPerClaim = writes, fsyncs
	b.ReportMetric(ms(res.prepare.p50), "prep-p50-ms")
	b.ReportMetric(ms(res.prepare.p99), "prep-p99-ms")
	b.ReportMetric(res.prepare.claimsPerSec, "prep-claims/s")
	b.ReportMetric(ms(res.unprepare.p50), "unprep-p50-ms")
	b.ReportMetric(res.unprepare.claimsPerSec, "unprep-claims/s")
	b.ReportMetric(fsyncs, "fsyncs/claim")
	b.ReportMetric(writes, "writes/claim")
	b.ReportMetric(ms(floorP50), "floor-p50-ms")
	b.ReportMetric(float64(res.prepare.p50)/float64(floorP50), "prep-p50/floor")
	return res
}

// fanOut calls f for every i in [first, last) from conc goroutines and
// returns how long that took.
func fanOut(conc, first, last int, f func(i int)) time.Duration {
	var next atomic.Int64
	next.Store(int64(first))
	var wg sync.WaitGroup
	start := time.Now()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= last {
					return
				}
				f(i)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

func stats(lat []time.Duration, total time.Duration) grpcStats {
	s := slices.Clone(lat)
	slices.Sort(s)
	return grpcStats{p50: s[len(s)/2], p99: s[len(s)*99/100], claimsPerSec: float64(len(s)) / total.Seconds()}
}

// durableFloor returns the p50 of n durable writes of a checkpoint-sized
// file in dir, made the way a durable checkpoint write is made.
func durableFloor(b *testing.B, dir string, n int) time.Duration {
	if err := os.Mkdir(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(dir, "checkpoint.json")
	data := make([]byte, 1024)
	lat := make([]time.Duration, n)
	for i := range lat {
		start := time.Now()
		if err := filewrite.Durable(path, data, 0o600, nil); err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(start)
	}
	slices.Sort(lat)
	return lat[n/2]
}
