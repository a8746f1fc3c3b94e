package nodeplugin_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	"github.com/gpufrac/gpufrac/pkg/gpusim"
	"github.com/gpufrac/gpufrac/pkg/inventory"
	"github.com/gpufrac/gpufrac/pkg/nodeplugin"
)

// BenchmarkPrepareOverGRPC drives NodePrepareResources and
// NodeUnprepareResources through the plugin's real DRA socket, as the
// kubelet does, for TimeSlicing claims at several concurrencies, and
// reports p50 and p99 of a Prepare and claims per second. The claims live
// in client-go's fake clientset, so API latency is not part of the figure.
//
// At concurrency 1 each Prepare is followed by its floor, timed in the same
// process on the same file system: the two durable writes (temp file,
// fsync, rename, directory fsync) a Prepare's checkpoint must make, Started
// and Completed. The floor's p50 and p99 and the ratio of Prepare's p50 to
// the floor's come out beside Prepare's, so a busy disk moves both.
func BenchmarkPrepareOverGRPC(b *testing.B) {
	for _, conc := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("concurrency-%d", conc), func(b *testing.B) { benchPrepare(b, conc) })
	}
}

func benchPrepare(b *testing.B, conc int) {
	ctx := klog.NewContext(context.Background(), klog.Background().V(1))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, UID: "node-uid"}})
	node, err := gpusim.NewNode("h200x8", nodeName, inventory.EnforcementDMem)
	if err != nil {
		b.Fatal(err)
	}
	root := b.TempDir()
	cfg := nodeplugin.Config{
		NodeName: nodeName, KubeClient: client, NVML: node.NVML, InventoryOptions: node.InventoryOptions,
		PluginDataDir: filepath.Join(root, "p"), RegistrarDir: filepath.Join(root, "r"), CDIRoot: filepath.Join(root, "c"),
		CDI: cdispec.Options{HookPath: "/hook", DeviceNode: gpusim.DeviceNode}, BootID: "b",
		Health: nodeplugin.HealthConfig{SimulatedFile: filepath.Join(root, "health.json")},
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

	// Claims are created up front so the timed loop is Prepare alone.
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
	latencies := make([]time.Duration, n)
	var floor []time.Duration
	floorDir := filepath.Join(root, "floor")
	if conc == 1 {
		floor = make([]time.Duration, n)
		if err := os.Mkdir(floorDir, 0o700); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range conc {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				ref := []*drapb.Claim{{Namespace: "default", Name: fmt.Sprintf("c%d", i), Uid: fmt.Sprintf("uid-%d", i)}}
				start := time.Now()
				resp, err := dra.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: ref})
				latencies[i] = time.Since(start)
				if err != nil || resp.Claims[ref[0].Uid].Error != "" {
					b.Errorf("prepare %d: %v %v", i, err, resp)
					return
				}
				if _, err := dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: ref}); err != nil {
					b.Errorf("unprepare %d: %v", i, err)
					return
				}
				if floor != nil {
					start := time.Now()
					durableWrite(b, floorDir)
					durableWrite(b, floorDir)
					floor[i] = time.Since(start)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(latencies)
	b.ReportMetric(float64(latencies[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(latencies[n*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "claims/s")
	if floor != nil {
		slices.Sort(floor)
		b.ReportMetric(float64(floor[n/2].Microseconds())/1000, "floor-p50-ms")
		b.ReportMetric(float64(floor[n*99/100].Microseconds())/1000, "floor-p99-ms")
		b.ReportMetric(float64(latencies[n/2])/float64(floor[n/2]), "p50/floor-p50")
	}
}

// durableWrite makes one checkpoint-sized write the way pkg/checkpoint
// does: temp file, fsync, rename over the file, fsync of the directory.
// Its cost also counts against the benchmark's throughput, so claims/s at
// concurrency 1 is lower than without it.
func durableWrite(b *testing.B, dir string) {
	tmp, err := os.CreateTemp(dir, "checkpoint.tmp-*")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := tmp.Write(make([]byte, 1024)); err != nil {
		b.Fatal(err)
	}
	if err := tmp.Sync(); err != nil {
		b.Fatal(err)
	}
	_ = tmp.Close()
	if err := os.Rename(tmp.Name(), filepath.Join(dir, "checkpoint.json")); err != nil {
		b.Fatal(err)
	}
	d, err := os.Open(dir)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		b.Fatal(err)
	}
	_ = d.Close()
}
