// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package plan_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/core/plan"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

const (
	node = "node-a"
	gib  = int64(1) << 30
)

func testInventory(enf domain.Enforcement, mps string) *domain.Inventory {
	inv := &domain.Inventory{DriverVersion: "615.23.01", CUDADriverVersion: "13.4", Enforcement: enf, MPSVersion: mps}
	for i := range 2 {
		inv.GPUs = append(inv.GPUs, domain.GPU{
			UUID: fmt.Sprintf("GPU-%d", i), Index: i, Minor: i, ProductName: "NVIDIA H200 141GB HBM3e",
			MemoryBytes: 141 * uint64(gib),
		})
	}
	return inv
}

type result struct {
	request, device, share, memory string
	pool, driver                   string
}

func config(source resourceapi.AllocationConfigSource, requests []string, params string) resourceapi.DeviceAllocationConfiguration {
	return resourceapi.DeviceAllocationConfiguration{
		Source:   source,
		Requests: requests,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver:     "gpufrac.dev",
			Parameters: runtime.RawExtension{Raw: []byte(params)},
		}},
	}
}

func fromClaim(params string) resourceapi.DeviceAllocationConfiguration {
	return config(resourceapi.AllocationConfigSourceClaim, nil, params)
}

func fromClass(params string) resourceapi.DeviceAllocationConfiguration {
	return config(resourceapi.AllocationConfigSourceClass, nil, params)
}

func fc(fields string) string {
	return `{"apiVersion":"gpufrac.dev/v1alpha1","kind":"FractionConfig"` + fields + `}`
}

func claim(results []result, configs ...resourceapi.DeviceAllocationConfiguration) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "llm", Namespace: "ns", UID: "uid-1"}}
	alloc := &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Config: configs}}
	for _, r := range results {
		res := resourceapi.DeviceRequestAllocationResult{
			Request: r.request, Driver: "gpufrac.dev", Pool: node, Device: r.device,
		}
		if r.driver != "" {
			res.Driver = r.driver
		}
		if r.pool != "" {
			res.Pool = r.pool
		}
		if r.share != "" {
			res.ShareID = ptr.To(types.UID(r.share))
		}
		if r.memory != "" {
			res.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(r.memory)}
		}
		alloc.Devices.Results = append(alloc.Devices.Results, res)
	}
	c.Status.Allocation = alloc
	return c
}

func share(device, shareID, gpu string, soft, hard int64, mode v1alpha1.ComputeMode, enf domain.Enforcement) plan.Device {
	idx := int(device[len(device)-1] - '0')
	return plan.Device{
		Request: "gpu", Pool: node, Device: device, ShareID: ptr.To(types.UID(shareID)),
		GPU:            domain.GPU{UUID: gpu, Index: idx, Minor: idx, ProductName: "NVIDIA H200 141GB HBM3e", MemoryBytes: 141 * uint64(gib)},
		SoftLimitBytes: soft, HardLimitBytes: hard, ComputeMode: mode, Enforcement: enf,
	}
}

// client is d as an MPS client of its GPU's v3 daemon on the main socket:
// what every TimeSlicing share on a node with per-cgroup limits and MPS v3
// becomes, so that the daemon's eviction upholds its request.
func client(d plan.Device, root string) plan.Device {
	d.MPS = mpslayout.For(root, d.GPU.UUID)
	d.MPS.Version = domain.MPSVersionV3
	return d
}

// nodeClient is d as a client of the node's one MPS v3 server, which
// lists both test GPUs (--mps-server-scope=node): its binding still names
// d's own GPU.
func nodeClient(d plan.Device, root, namespace string) plan.Device {
	d.MPS = mpslayout.ForNodeServer(root, d.GPU.UUID, []string{"GPU-1", "GPU-0"})
	d.MPS.Version, d.MPS.Namespace = domain.MPSVersionV3, namespace
	return d
}

func TestComputeValid(t *testing.T) {
	opts := plan.Options{NodeName: node, MPSRoot: "/var/lib/gpufrac/mps"}
	dmem := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	smShare := share("gpu-0", "s1", "GPU-0", 40*gib, 60*gib, v1alpha1.SMSharing, domain.EnforcementDMem)
	legacyBinding := *mpslayout.For("/var/lib/gpufrac/mps", "GPU-0")
	// On an MPS v3 node the claim gets its own namespace on the GPU's
	// shared server.
	v3Binding := legacyBinding
	v3Binding.Version, v3Binding.Namespace = domain.MPSVersionV3, mpslayout.NamespaceFor("uid-1")
	smShare.MPS = &v3Binding
	smOnMPSNode := smShare
	smOnMPSNode.MPS = &legacyBinding
	smOnMPSNode.Enforcement = domain.EnforcementMPS
	smOnMPSNode.ActiveThreadPercentage = ptr.To[int32](50)

	for _, tc := range []struct {
		name  string
		inv   *domain.Inventory
		scope string
		claim *resourceapi.ResourceClaim
		want  []plan.Device
	}{{
		name:  "single share with a burst limit",
		inv:   dmem,
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}}, fromClaim(fc(`,"memoryLimit":"60Gi"`))),
		want:  []plan.Device{client(share("gpu-0", "s1", "GPU-0", 40*gib, 60*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot)},
	}, {
		name:  "limit defaults to the request; no config at all",
		inv:   dmem,
		claim: claim([]result{{request: "gpu", device: "gpu-1", share: "s1", memory: "20224Mi"}}),
		want:  []plan.Device{client(share("gpu-1", "s1", "GPU-1", 20224<<20, 20224<<20, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot)},
	}, {
		name: "two shares of one GPU in one claim",
		inv:  dmem,
		claim: claim([]result{
			{request: "gpu", device: "gpu-0", share: "s1", memory: "10Gi"},
			{request: "gpu", device: "gpu-0", share: "s2", memory: "10Gi"},
		}, fromClaim(fc(`,"memoryLimit":"12Gi"`))),
		want: []plan.Device{
			client(share("gpu-0", "s1", "GPU-0", 10*gib, 12*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot),
			client(share("gpu-0", "s2", "GPU-0", 10*gib, 12*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot),
		},
	}, {
		name: "two GPUs (count 2) where no MPS daemon runs: strict partitions, no MPS",
		inv:  testInventory(domain.EnforcementDMem, domain.MPSVersionNone),
		claim: claim([]result{
			{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
			{request: "gpu", device: "gpu-1", share: "s2", memory: "40Gi"},
		}),
		want: []plan.Device{
			share("gpu-0", "s1", "GPU-0", 40*gib, 40*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem),
			share("gpu-1", "s2", "GPU-1", 40*gib, 40*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem),
		},
	}, {
		name: "class sets SMSharing, claim sets the limit: both apply",
		inv:  dmem,
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}},
			fromClass(fc(`,"computeMode":"SMSharing"`)), fromClaim(fc(`,"memoryLimit":"60Gi"`))),
		want: []plan.Device{smShare},
	}, {
		name: "claim config overrides class config, whatever their order in the list",
		inv:  dmem,
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}},
			fromClaim(fc(`,"computeMode":"TimeSlicing"`)), fromClass(fc(`,"computeMode":"SMSharing","memoryLimit":"50Gi"`))),
		want: []plan.Device{client(share("gpu-0", "s1", "GPU-0", 40*gib, 50*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot)},
	}, {
		name: "config for another request does not apply",
		inv:  dmem,
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}},
			config(resourceapi.AllocationConfigSourceClaim, []string{"other"}, fc(`,"memoryLimit":"1Gi"`))),
		want: []plan.Device{client(share("gpu-0", "s1", "GPU-0", 40*gib, 40*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot)},
	}, {
		name:  "SMSharing on a legacy-MPS node is enforced by the daemon",
		inv:   testInventory(domain.EnforcementMPS, domain.MPSVersionLegacy),
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}}, fromClaim(fc(`,"memoryLimit":"60Gi","computeMode":"SMSharing","activeThreadPercentage":50`))),
		want:  []plan.Device{smOnMPSNode},
	}, {
		name:  "no limit asked on a node that cannot enforce: guaranteed only",
		inv:   testInventory(domain.EnforcementNone, domain.MPSVersionNone),
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}}),
		want:  []plan.Device{share("gpu-0", "s1", "GPU-0", 40*gib, 40*gib, v1alpha1.TimeSlicing, domain.EnforcementNone)},
	}, {
		name: "results of other drivers are not ours",
		inv:  dmem,
		claim: claim([]result{
			{request: "nic", device: "eth0", driver: "net.example.com", pool: "other"},
			{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
		}),
		want: []plan.Device{client(share("gpu-0", "s1", "GPU-0", 40*gib, 40*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot)},
	}, {
		name: "TimeSlicing on two GPUs (count 2) under the node server: each share an MPS client of it, limits per GPU",
		inv:  dmem, scope: domain.MPSServerScopeNode,
		claim: claim([]result{
			{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
			{request: "gpu", device: "gpu-1", share: "s2", memory: "20Gi"},
		}, fromClaim(fc(`,"memoryLimit":"60Gi"`))),
		want: []plan.Device{
			nodeClient(share("gpu-0", "s1", "GPU-0", 40*gib, 60*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot, ""),
			nodeClient(share("gpu-1", "s2", "GPU-1", 20*gib, 60*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem), opts.MPSRoot, ""),
		},
	}, {
		name: "SMSharing on two GPUs under the node server: one namespace of it for the claim",
		inv:  dmem, scope: domain.MPSServerScopeNode,
		claim: claim([]result{
			{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
			{request: "gpu", device: "gpu-1", share: "s2", memory: "40Gi"},
		}, fromClass(fc(`,"computeMode":"SMSharing"`))),
		want: []plan.Device{
			nodeClient(share("gpu-0", "s1", "GPU-0", 40*gib, 40*gib, v1alpha1.SMSharing, domain.EnforcementDMem), opts.MPSRoot, mpslayout.NamespaceFor("uid-1")),
			nodeClient(share("gpu-1", "s2", "GPU-1", 40*gib, 40*gib, v1alpha1.SMSharing, domain.EnforcementDMem), opts.MPSRoot, mpslayout.NamespaceFor("uid-1")),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := opts
			opts.MPSServerScope = tc.scope
			got, err := plan.Compute(tc.claim, tc.inv, opts)
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got.UID != "uid-1" || got.Namespace != "ns" || got.Name != "llm" {
				t.Errorf("claim identity %s %s/%s", got.UID, got.Namespace, got.Name)
			}
			if !reflect.DeepEqual(got.Devices, tc.want) {
				g, _ := json.MarshalIndent(got.Devices, "", " ")
				w, _ := json.MarshalIndent(tc.want, "", " ")
				t.Errorf("plan differs\ngot:  %s\nwant: %s", g, w)
			}
		})
	}
}

func TestComputeInvalid(t *testing.T) {
	opts := plan.Options{NodeName: node, MPSRoot: "/mps"}
	dmem := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
	one := []result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"}}
	notAllocated := claim(nil)
	notAllocated.Status.Allocation = nil

	const prefix = "claim ns/llm cannot be prepared: "
	twoGPUs := []result{
		{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
		{request: "gpu", device: "gpu-1", share: "s2", memory: "40Gi"},
	}
	for _, tc := range []struct {
		name  string
		inv   *domain.Inventory
		scope string
		claim *resourceapi.ResourceClaim
		want  string
	}{{
		name: "not allocated", inv: dmem, claim: notAllocated,
		want: `status.allocation: Required value: the claim is not allocated`,
	}, {
		name: "limit below request", inv: dmem, claim: claim(one, fromClaim(fc(`,"memoryLimit":"30Gi"`))),
		want: `status.allocation.devices.results[0].config.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi`,
	}, {
		name: "limit above the GPU", inv: dmem, claim: claim(one, fromClaim(fc(`,"memoryLimit":"200Gi"`))),
		want: `status.allocation.devices.results[0].config.memoryLimit: Invalid value: "200Gi": must not exceed the GPU's memory 141Gi`,
	}, {
		name: "unknown field, reported where it was written", inv: dmem,
		claim: claim(one, fromClass(fc(``)), fromClaim(fc(`,"memoryLimt":"60Gi"`))),
		want:  `status.allocation.devices.config[1].opaque.parameters: Forbidden: unknown field "memoryLimt"`,
	}, {
		name: "activeThreadPercentage without SMSharing", inv: dmem, claim: claim(one, fromClaim(fc(`,"activeThreadPercentage":20`))),
		want: `status.allocation.devices.results[0].config.activeThreadPercentage: Forbidden: only allowed with computeMode SMSharing, not TimeSlicing`,
	}, {
		name: "another node's pool", inv: dmem,
		claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi", pool: "node-b"}}),
		want:  `status.allocation.devices.results[0].pool: Invalid value: "node-b": allocated from another node's pool; this is node node-a`,
	}, {
		name: "GPU not on this node", inv: dmem, claim: claim([]result{{request: "gpu", device: "gpu-7", share: "s1", memory: "40Gi"}}),
		want: `status.allocation.devices.results[0].device: Not found: "gpu-7"`,
	}, {
		name: "no consumed capacity", inv: dmem, claim: claim([]result{{request: "gpu", device: "gpu-0", share: "s1"}}),
		want: `status.allocation.devices.results[0].consumedCapacity[memory]: Required value: gpufrac devices are shared: the scheduler must record the consumed memory (is the DRAConsumableCapacity feature off?)`,
	}, {
		name: "explicit limit on a node that cannot enforce", inv: testInventory(domain.EnforcementNone, domain.MPSVersionNone),
		claim: claim(one, fromClaim(fc(`,"memoryLimit":"60Gi"`))),
		want:  `status.allocation.devices.results[0].config.memoryLimit: Forbidden: this node cannot enforce GPU memory limits (memoryEnforcement none); select nodes with device.attributes["gpufrac.dev"].memoryEnforcement == "dmem"`,
	}, {
		name: "TimeSlicing limit on an MPS-only node", inv: testInventory(domain.EnforcementMPS, domain.MPSVersionLegacy),
		claim: claim(one, fromClaim(fc(`,"memoryLimit":"60Gi"`))),
		want:  `status.allocation.devices.results[0].config.memoryLimit: Forbidden: this node enforces GPU memory limits only for SMSharing (memoryEnforcement mps); use computeMode SMSharing or select nodes with device.attributes["gpufrac.dev"].memoryEnforcement == "dmem"`,
	}, {
		name: "SMSharing without MPS", inv: testInventory(domain.EnforcementDMem, domain.MPSVersionNone),
		claim: claim(one, fromClaim(fc(`,"computeMode":"SMSharing"`))),
		want:  `status.allocation.devices.results[0].config.computeMode: Invalid value: "SMSharing": this node has no MPS (no nvidia-cuda-mps-control under its driver root, or MPS turned off); select nodes with device.attributes["gpufrac.dev"].mpsVersion != "none"`,
	}, {
		name: "a limit above the request where no MPS daemon runs", inv: testInventory(domain.EnforcementDMem, domain.MPSVersionNone),
		claim: claim(one, fromClaim(fc(`,"memoryLimit":"60Gi"`))),
		want:  `status.allocation.devices.results[0].config.memoryLimit: Forbidden: memoryLimit 60Gi exceeds the request 40Gi, but this node runs no MPS daemon (mpsVersion none: no MPS binaries under the driver root, or MPS turned off on the plugin), and NVIDIA upholds a request that neighbours borrow against only by MPS eviction; set memoryLimit equal to the request (strict partition) or select nodes with device.attributes["gpufrac.dev"].mpsVersion == "v3"`,
	}, {
		// Per-GPU daemons (the default scope): a container reaches one
		// daemon, and two servers on one GPU could not evict each other's
		// borrowers, so the claim is refused with that reason.
		name: "TimeSlicing on two GPUs in one claim where every share is an MPS client, per-GPU daemons", inv: dmem,
		claim: claim(twoGPUs),
		want:  `status.allocation.devices.results: Forbidden: shares on 2 GPUs in one claim: on this node every share is an MPS client (its request is upheld by MPS eviction), a container joins one MPS control daemon, and daemons are per GPU on this node; use one GPU per claim, or select a node server (nodes whose slices say device.attributes["gpufrac.dev"].mpsServerScope == "node" run one server for all their GPUs)`,
	}, {
		name: "SMSharing on two GPUs in one claim, per-GPU daemons", inv: dmem, scope: domain.MPSServerScopeGPU,
		claim: claim(twoGPUs, fromClass(fc(`,"computeMode":"SMSharing"`))),
		want:  `status.allocation.devices.results: Forbidden: SMSharing shares on 2 GPUs in one claim: a container joins one MPS server, and servers are per GPU on this node; use one GPU per SMSharing claim, or select a node server (nodes whose slices say device.attributes["gpufrac.dev"].mpsServerScope == "node" run one server for all their GPUs)`,
	}, {
		// A legacy daemon has no allowed_devices list: the node scope
		// applies to MPS v3 only, and legacy daemons stay per GPU.
		name: "SMSharing on two GPUs of a legacy-MPS node, node scope asked", inv: testInventory(domain.EnforcementMPS, domain.MPSVersionLegacy),
		scope: domain.MPSServerScopeNode,
		claim: claim(twoGPUs, fromClass(fc(`,"computeMode":"SMSharing"`))),
		want:  `status.allocation.devices.results: Forbidden: SMSharing shares on 2 GPUs in one claim: a container joins one MPS server, and servers are per GPU on this node; use one GPU per SMSharing claim, or select a node server (nodes whose slices say device.attributes["gpufrac.dev"].mpsServerScope == "node" run one server for all their GPUs)`,
	}, {
		name: "a mode the GPU is not reserved for", inv: func() *domain.Inventory {
			inv := testInventory(domain.EnforcementDMem, domain.MPSVersionV3)
			inv.GPUs[0].ComputeModes = domain.ComputeModesTimeSlicing
			return inv
		}(),
		claim: claim(one, fromClaim(fc(`,"computeMode":"SMSharing"`))),
		want:  `status.allocation.devices.results[0].config.computeMode: Forbidden: GPU gpu-0 is reserved for TimeSlicing on this node (--sm-sharing-gpus); select GPUs with device.attributes["gpufrac.dev"].computeModes != "TimeSlicing"`,
	}, {
		name: "every problem is reported", inv: dmem,
		claim: claim([]result{
			{request: "gpu", device: "gpu-0", share: "s1", memory: "40Gi"},
			{request: "gpu", device: "gpu-9", share: "s2", memory: "40Gi"},
		}, fromClaim(fc(`,"memoryLimit":"30Gi"`))),
		want: `status.allocation.devices.results[0].config.memoryLimit: Invalid value: "30Gi": must not be below the guaranteed memory request 40Gi; ` +
			`status.allocation.devices.results[1].device: Not found: "gpu-9"`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			opts := opts
			opts.MPSServerScope = tc.scope
			got, err := plan.Compute(tc.claim, tc.inv, opts)
			if err == nil {
				t.Fatalf("no error; plan %+v", got)
			}
			var invalid *plan.InvalidError
			if !errors.As(err, &invalid) {
				t.Errorf("error %T is not an InvalidError", err)
			}
			if err.Error() != prefix+tc.want {
				t.Errorf("error\n got: %s\nwant: %s", err.Error(), prefix+tc.want)
			}
		})
	}
}

func TestPerGPUSumsSharesOfOneGPU(t *testing.T) {
	c := &plan.Claim{Devices: []plan.Device{
		share("gpu-1", "a", "GPU-1", 10*gib, 12*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem),
		share("gpu-0", "b", "GPU-0", 5*gib, 5*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem),
		share("gpu-1", "c", "GPU-1", 10*gib, 12*gib, v1alpha1.TimeSlicing, domain.EnforcementDMem),
	}}
	want := []plan.GPULimits{
		{UUID: "GPU-1", Minor: 1, SoftLimitBytes: 20 * gib, HardLimitBytes: 24 * gib},
		{UUID: "GPU-0", Minor: 0, SoftLimitBytes: 5 * gib, HardLimitBytes: 5 * gib},
	}
	if got := c.PerGPU(); !reflect.DeepEqual(got, want) {
		t.Errorf("PerGPU = %+v, want %+v", got, want)
	}
}
