// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package plan is the pure core of claim preparation: from an allocated
// ResourceClaim, its merged FractionConfigs and the node's GPU inventory it
// computes what every allocated share gets (GPU, guaranteed and hard memory,
// compute mode, enforcement, MPS binding), or every reason it cannot. It does
// no I/O; the CDI spec, the checkpoint, the MPS daemon and the claim status
// are side effects that consume a Claim plan.
package plan

import (
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/core/mpslayout"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/pkg/domain"
)

// Options are the node facts a plan depends on besides the inventory.
type Options struct {
	// NodeName is the pool this plugin publishes; results for another pool
	// were not meant for this node.
	NodeName string
	// MPSRoot is the host directory under which each GPU's MPS control
	// daemon keeps its pipe, log and shm directories.
	MPSRoot string
	// MPSServerScope is domain.MPSServerScopeNode where one MPS v3 node
	// server serves all the node's fraction GPUs, so a claim's MPS clients
	// may span several GPUs; empty or domain.MPSServerScopeGPU: one daemon
	// per GPU, and such claims are refused (checkMPSPerContainer). Legacy
	// MPS nodes are per GPU whatever it says: a legacy daemon has no
	// allowed_devices list.
	MPSServerScope string
}

// Claim is the plan for one claim: what to prepare, and everything
// Unprepare needs to undo it after the claim object is gone.
type Claim struct {
	UID       types.UID `json:"uid"`
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	Devices   []Device  `json:"devices"`
}

// Device is one allocated share.
type Device struct {
	// Request is the request (or request/subrequest) the share serves.
	Request string     `json:"request"`
	Pool    string     `json:"pool"`
	Device  string     `json:"device"`
	ShareID *types.UID `json:"shareID,omitempty"`

	GPU domain.GPU `json:"gpu"`
	// SoftLimitBytes is the guaranteed memory: what the scheduler consumed.
	SoftLimitBytes int64 `json:"softLimitBytes"`
	// HardLimitBytes is the ceiling: memoryLimit, or the request.
	HardLimitBytes         int64                `json:"hardLimitBytes"`
	ComputeMode            v1alpha1.ComputeMode `json:"computeMode"`
	ActiveThreadPercentage *int32               `json:"activeThreadPercentage,omitempty"`
	// Enforcement is what enforces HardLimitBytes for this share.
	Enforcement domain.Enforcement `json:"enforcement"`
	// MPS is set for SMSharing shares, and on nodes with per-cgroup
	// limits and an MPS v3 daemon for every share (see Compute).
	MPS *mpslayout.Binding `json:"mps,omitempty"`
	// AdminAccess marks a device allocated with DRA's adminAccess (a
	// monitoring pod): it gets the GPU's device node and the driver's
	// files, and nothing else: no limits (both are zero), no MPS route, no
	// compute mode, and no share of the node's accounting (Counted).
	AdminAccess bool `json:"adminAccess,omitempty"`
	// MIG is set when the device is a whole MIG instance: GPU is then the
	// instance (its UUID and memory on the parent's minor), the limits are
	// its memory, Enforcement is none and MPS is nil.
	MIG *domain.MIGRef `json:"mig,omitempty"`
}

// Counted tells whether d takes part in the node's memory accounting: the
// per-GPU guaranteed and limit sums, the one-guarantee rule, compute-mode
// conflicts, MPS and incidents. An adminAccess device does not, as DRA
// intends: the scheduler does not count it either (kube-scheduler's
// foreachAllocatedDevice skips adminAccess results).
func (d Device) Counted() bool { return !d.AdminAccess }

// InvalidError is a claim that can never be prepared on this node as it
// stands: retrying will not help until the claim or the node changes.
type InvalidError struct {
	Namespace, Name string
	Errs            field.ErrorList
}

// MaxErrorBytes bounds InvalidError's message: a claim with many bad
// shares, or one huge bad value, gives an error (the kubelet's answer, the
// claim's Event) that is cut with a count of what was left out.
const MaxErrorBytes = 4096

func (e *InvalidError) Error() string {
	msgs := make([]string, len(e.Errs))
	for i, err := range e.Errs {
		msgs[i] = err.Error()
	}
	prefix := fmt.Sprintf("claim %s/%s cannot be prepared: ", e.Namespace, e.Name)
	return prefix + safetext.Join(msgs, "; ", max(0, MaxErrorBytes-len(prefix)))
}

// Compute plans claim on the node described by inv. The claim must be
// allocated; results of other drivers are ignored.
func Compute(claim *resourceapi.ResourceClaim, inv *domain.Inventory, opts Options) (*Claim, error) {
	if claim.Status.Allocation == nil {
		return nil, &InvalidError{claim.Namespace, claim.Name, field.ErrorList{
			field.Required(field.NewPath("status", "allocation"), "the claim is not allocated")}}
	}
	alloc := claim.Status.Allocation
	resultsPath := field.NewPath("status", "allocation", "devices", "results")
	configsPath := field.NewPath("status", "allocation", "devices", "config")

	if err := checkShareCount(alloc.Devices.Results, inv, resultsPath); err != nil {
		return nil, &InvalidError{claim.Namespace, claim.Name, field.ErrorList{err}}
	}
	out := &Claim{UID: claim.UID, Namespace: claim.Namespace, Name: claim.Name}
	var errs field.ErrorList
	for i, r := range alloc.Devices.Results {
		if r.Driver != v1alpha1.DriverName {
			continue
		}
		var dev *Device
		var devErrs field.ErrorList
		if r.AdminAccess != nil && *r.AdminAccess {
			dev, devErrs = planAdminDevice(r, resultsPath.Index(i), alloc.Devices.Config, configsPath, inv, opts)
		} else {
			dev, devErrs = planDevice(r, resultsPath.Index(i), alloc.Devices.Config, configsPath, inv, opts)
		}
		errs = append(errs, devErrs...)
		if dev != nil {
			if dev.MPS != nil && dev.MPS.Version == domain.MPSVersionV3 && dev.ComputeMode == v1alpha1.SMSharing {
				dev.MPS.Namespace = mpslayout.NamespaceFor(claim.UID)
			}
			out.Devices = append(out.Devices, *dev)
		}
	}
	errs = append(errs, checkPerGPUConsumed(out.Devices, resultsPath)...)
	errs = append(errs, checkMPSPerContainer(out.Devices, resultsPath)...)
	if len(errs) > 0 {
		return nil, &InvalidError{claim.Namespace, claim.Name, errs}
	}
	return out, nil
}

func planDevice(r resourceapi.DeviceRequestAllocationResult, path *field.Path,
	allConfigs []resourceapi.DeviceAllocationConfiguration, configsPath *field.Path,
	inv *domain.Inventory, opts Options) (*Device, field.ErrorList) {
	var errs field.ErrorList
	if r.Pool == opts.NodeName {
		if m, isMIG := inv.MIGByName(r.Device); isMIG {
			return planMIG(r, m, path, allConfigs, configsPath)
		}
	}
	gpu, err := locate(r, path, inv, opts)
	if err != nil {
		return nil, field.ErrorList{err}
	}
	consumedPath := path.Child("consumedCapacity").Key(string(domain.MemoryCapacity))
	request, ok := r.ConsumedCapacity[domain.MemoryCapacity]
	if !ok {
		return nil, field.ErrorList{field.Required(consumedPath,
			"gpufrac devices are shared: the scheduler must record the consumed memory (is the DRAConsumableCapacity feature off?)")}
	}
	soft, boundErr := consumedBytes(request, gpu, consumedPath)
	if boundErr != nil {
		return nil, field.ErrorList{boundErr}
	}

	cfg, cfgErrs := mergedConfig(allConfigs, configsPath, r)
	errs = append(errs, cfgErrs...)
	if cfg == nil {
		return nil, errs
	}
	cfg.Default()
	// Config errors are reported against where the effective value came
	// from: the merged config has no single origin, so name the result.
	cfgPath := path.Child("config")
	errs = append(errs, v1alpha1.Validate(cfg, cfgPath)...)
	gpuMemory := resource.NewQuantity(int64(gpu.MemoryBytes), resource.BinarySI)
	errs = append(errs, v1alpha1.ValidateAgainstRequest(cfg, request, gpuMemory, cfgPath)...)

	limit := v1alpha1.EffectiveLimit(cfg, request)
	dev := &Device{
		Request:                r.Request,
		Pool:                   r.Pool,
		Device:                 r.Device,
		ShareID:                r.ShareID,
		GPU:                    gpu,
		SoftLimitBytes:         soft,
		HardLimitBytes:         limit.Value(),
		ComputeMode:            cfg.EffectiveComputeMode(),
		ActiveThreadPercentage: cfg.ActiveThreadPercentage,
	}
	if gpu.ComputeModes != "" && gpu.ComputeModes != domain.ComputeModesAny && gpu.ComputeModes != string(dev.ComputeMode) {
		errs = append(errs, field.Forbidden(cfgPath.Child("computeMode"), fmt.Sprintf(
			"GPU %s is reserved for %s on this node (--sm-sharing-gpus); select GPUs with device.attributes[\"gpufrac.dev\"].computeModes != \"%s\"",
			r.Device, gpu.ComputeModes, gpu.ComputeModes)))
	}
	errs = append(errs, enforce(dev, inv, opts, cfg.MemoryLimit != nil, request, limit, cfgPath)...)
	return dev, errs
}

// locate finds the GPU of an allocation result on this node, checking the
// pool and the share ID before anything is named after them.
func locate(r resourceapi.DeviceRequestAllocationResult, path *field.Path, inv *domain.Inventory, opts Options) (domain.GPU, *field.Error) {
	if r.Pool != opts.NodeName {
		return domain.GPU{}, field.Invalid(path.Child("pool"), r.Pool,
			fmt.Sprintf("allocated from another node's pool; this is node %s", opts.NodeName))
	}
	gpu, ok := gpuForDevice(inv, r.Device)
	if !ok {
		return domain.GPU{}, field.NotFound(path.Child("device"), r.Device)
	}
	if r.ShareID != nil {
		if err := checkUID(string(*r.ShareID), path.Child("shareID")); err != nil {
			return domain.GPU{}, err
		}
	}
	return gpu, nil
}

// planAdminDevice plans a device allocated with adminAccess (a monitoring
// pod, DRA's "administrative access ... ignore all ordinary claims to the
// device with respect to access modes and any resource allocations",
// k8s.io/api resource/v1 ExactDeviceRequest.AdminAccess): the GPU's device
// node and the driver's files, with no limit, no MPS route and no compute
// mode, whatever memory the scheduler recorded for it (the scheduler does
// not count it against the GPU once allocated). A FractionConfig of the
// claim that applies to it is refused: it would promise limits the node
// does not apply. DeviceClass configs (the SMSharing class's) are not the
// claim author's and are ignored.
func planAdminDevice(r resourceapi.DeviceRequestAllocationResult, path *field.Path,
	allConfigs []resourceapi.DeviceAllocationConfiguration, configsPath *field.Path,
	inv *domain.Inventory, opts Options) (*Device, field.ErrorList) {
	gpu, err := locate(r, path, inv, opts)
	if err != nil {
		return nil, field.ErrorList{err}
	}
	var errs field.ErrorList
	for i, c := range allConfigs {
		if c.Source != resourceapi.AllocationConfigSourceClaim || c.Opaque == nil || c.Opaque.Driver != v1alpha1.DriverName ||
			len(resourceclaim.ConfigForResult(allConfigs[i:i+1], r)) == 0 {
			continue
		}
		errs = append(errs, field.Forbidden(configsPath.Index(i), fmt.Sprintf(
			"request %s asks for adminAccess (a monitoring pod): it gets GPU %s without memory limits, MPS or a compute mode, so a gpufrac.dev FractionConfig cannot apply to it; list only the fraction requests in this config's requests",
			r.Request, r.Device)))
	}
	return &Device{
		Request: r.Request, Pool: r.Pool, Device: r.Device, ShareID: r.ShareID,
		GPU: gpu, Enforcement: domain.EnforcementNone, AdminAccess: true,
	}, errs
}

// enforce sets how the node upholds dev's memory (its enforcement) and
// binds dev to its GPU's MPS daemon where it is an MPS client; a share the
// node cannot enforce as configured (at cfgPath) is refused. explicitLimit
// says the config sets a memory limit; request and limit are the share's.
func enforce(dev *Device, inv *domain.Inventory, opts Options, explicitLimit bool, request, limit resource.Quantity, cfgPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	enforcement, enfErr := enforcementFor(inv, dev.ComputeMode, explicitLimit, cfgPath)
	if enfErr != nil {
		errs = append(errs, enfErr)
	}
	dev.Enforcement = enforcement
	// NVIDIA upholds the soft limit (the guaranteed request) only by MPS
	// eviction, which needs both the borrower and the one it borrows from
	// to be clients of a memacct-enabled daemon. So on a node with
	// per-cgroup limits every share is an MPS client where the node runs
	// MPS v3 daemons (the inventory says mpsVersion v3 only then), and a
	// share may not borrow above its request where it does not.
	guarded := enforcement == domain.EnforcementDMem && inv.MPSVersion == domain.MPSVersionV3
	if enforcement == domain.EnforcementDMem && !guarded && dev.HardLimitBytes > dev.SoftLimitBytes {
		errs = append(errs, field.Forbidden(cfgPath.Child("memoryLimit"), fmt.Sprintf(
			"memoryLimit %s exceeds the request %s, but this node runs no MPS daemon (mpsVersion %s: no MPS binaries under the driver root, or MPS turned off on the plugin), and NVIDIA upholds a request that neighbours borrow against only by MPS eviction; set memoryLimit equal to the request (strict partition) or select nodes with device.attributes[\"gpufrac.dev\"].mpsVersion == \"v3\"",
			limit.String(), request.String(), inv.MPSVersion)))
	}
	if dev.ComputeMode == v1alpha1.SMSharing || guarded {
		dev.MPS = mpsBinding(inv, opts, dev.GPU.UUID)
		dev.MPS.Version = mpsVersion(inv)
	}
	return errs
}

// mpsBinding is the daemon a share of gpu reaches: the node server, which
// lists every fraction GPU of the node, where the plugin runs one and the
// node's MPS is v3; the GPU's own daemon otherwise.
func mpsBinding(inv *domain.Inventory, opts Options, gpu string) *mpslayout.Binding {
	if opts.MPSServerScope != domain.MPSServerScopeNode || inv.MPSVersion != domain.MPSVersionV3 {
		return mpslayout.For(opts.MPSRoot, gpu)
	}
	uuids := make([]string, len(inv.GPUs))
	for i, g := range inv.GPUs {
		uuids[i] = g.UUID
	}
	return mpslayout.ForNodeServer(opts.MPSRoot, gpu, uuids)
}

// mpsVersion is the binding's Version for the node's MPS: empty means
// legacy, so plans of legacy nodes read as they always have.
func mpsVersion(inv *domain.Inventory) string {
	if inv.MPSVersion == domain.MPSVersionV3 {
		return domain.MPSVersionV3
	}
	return ""
}

func gpuForDevice(inv *domain.Inventory, name string) (domain.GPU, bool) {
	for _, g := range inv.GPUs {
		if domain.DeviceName(g.Index) == name {
			return g, true
		}
	}
	return domain.GPU{}, false
}

// mergedConfig layers the gpufrac configs that apply to r: class configs
// first, claim configs after, each group in its listed order, later wins.
func mergedConfig(all []resourceapi.DeviceAllocationConfiguration, path *field.Path,
	r resourceapi.DeviceRequestAllocationResult) (*v1alpha1.FractionConfig, field.ErrorList) {
	var errs field.ErrorList
	var fromClass, fromClaim []*v1alpha1.FractionConfig
	for i, c := range all {
		// One config at a time keeps its index for error paths while the
		// request matching (subrequests included) stays upstream's.
		if c.Opaque == nil || c.Opaque.Driver != v1alpha1.DriverName || len(resourceclaim.ConfigForResult(all[i:i+1], r)) == 0 {
			continue
		}
		cfg, decodeErrs := v1alpha1.Decode(c.Opaque.Parameters.Raw, path.Index(i).Child("opaque", "parameters"))
		if len(decodeErrs) > 0 {
			errs = append(errs, decodeErrs...)
			continue
		}
		if c.Source == resourceapi.AllocationConfigSourceClass {
			fromClass = append(fromClass, cfg)
		} else {
			fromClaim = append(fromClaim, cfg)
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return v1alpha1.Merge(append(fromClass, fromClaim...)...), nil
}

// enforcementFor decides what enforces a share's hard limit on this node,
// and refuses a limit the node cannot enforce rather than pretend.
func enforcementFor(inv *domain.Inventory, mode v1alpha1.ComputeMode, explicitLimit bool, cfgPath *field.Path) (domain.Enforcement, *field.Error) {
	if mode == v1alpha1.SMSharing && inv.MPSVersion == domain.MPSVersionNone {
		return domain.EnforcementNone, field.Invalid(cfgPath.Child("computeMode"), string(mode),
			"this node has no MPS (no nvidia-cuda-mps-control under its driver root, or MPS turned off); select nodes with device.attributes[\"gpufrac.dev\"].mpsVersion != \"none\"")
	}
	switch {
	case inv.Enforcement == domain.EnforcementDMem:
		return domain.EnforcementDMem, nil
	case mode == v1alpha1.SMSharing:
		// The MPS daemon's pinned memory limit binds every client.
		return domain.EnforcementMPS, nil
	case explicitLimit:
		reason := "this node cannot enforce GPU memory limits (memoryEnforcement none); select nodes with device.attributes[\"gpufrac.dev\"].memoryEnforcement == \"dmem\""
		if inv.Enforcement == domain.EnforcementMPS {
			reason = "this node enforces GPU memory limits only for SMSharing (memoryEnforcement mps); use computeMode SMSharing or select nodes with device.attributes[\"gpufrac.dev\"].memoryEnforcement == \"dmem\""
		}
		return domain.EnforcementNone, field.Forbidden(cfgPath.Child("memoryLimit"), reason)
	default:
		// No limit was asked for: the share is guaranteed by the scheduler
		// and not capped, and the claim status says so.
		return domain.EnforcementNone, nil
	}
}

// checkMPSPerContainer refuses MPS-bound shares of one claim that reach
// more than one MPS daemon: a CUDA process reaches one control daemon
// (one CUDA_MPS_PIPE_DIRECTORY). With per-GPU daemons that is a claim's
// MPS shares on more than one GPU; a node server (Options.MPSServerScope)
// serves all the node's GPUs, so every MPS share of a claim reaches it and
// the claim may span GPUs, each share still its GPU's in the ledger.
func checkMPSPerContainer(devs []Device, resultsPath *field.Path) field.ErrorList {
	gpus, daemons := map[string]bool{}, map[string]bool{}
	smSharing := false
	for _, d := range devs {
		if d.MPS != nil {
			gpus[d.GPU.UUID] = true
			daemons[d.MPS.DaemonKey()] = true
			smSharing = smSharing || d.ComputeMode == v1alpha1.SMSharing
		}
	}
	if len(daemons) <= 1 {
		return nil
	}
	if smSharing {
		return field.ErrorList{field.Forbidden(resultsPath,
			fmt.Sprintf("SMSharing shares on %d GPUs in one claim: a container joins one MPS server, and servers are per GPU on this node; use one GPU per SMSharing claim, or select a node server (nodes whose slices say device.attributes[\"gpufrac.dev\"].mpsServerScope == \"node\" run one server for all their GPUs)", len(gpus)))}
	}
	return field.ErrorList{field.Forbidden(resultsPath,
		fmt.Sprintf("shares on %d GPUs in one claim: on this node every share is an MPS client (its request is upheld by MPS eviction), a container joins one MPS control daemon, and daemons are per GPU on this node; use one GPU per claim, or select a node server (nodes whose slices say device.attributes[\"gpufrac.dev\"].mpsServerScope == \"node\" run one server for all their GPUs)", len(gpus)))}
}

// GPULimits is the per-GPU sum of a claim's shares: two shares of one GPU
// in one claim give the container both.
type GPULimits struct {
	UUID           string
	Minor          int
	SoftLimitBytes int64
	HardLimitBytes int64
}

// PerGPU sums the claim's shares by GPU, in the order GPUs first appear.
func (c *Claim) PerGPU() []GPULimits {
	var out []GPULimits
	index := map[string]int{}
	for _, d := range c.Devices {
		// An adminAccess device names its GPU (NVIDIA_VISIBLE_DEVICES) and
		// adds nothing to the sums.
		i, ok := index[d.GPU.UUID]
		if !ok {
			i = len(out)
			index[d.GPU.UUID] = i
			out = append(out, GPULimits{UUID: d.GPU.UUID, Minor: d.GPU.Minor})
		}
		if d.Counted() {
			out[i].SoftLimitBytes += d.SoftLimitBytes
			out[i].HardLimitBytes += d.HardLimitBytes
		}
	}
	return out
}

// Counted is the claim with its adminAccess devices left out: what the
// node accounts for (Device.Counted).
func (c *Claim) Counted() *Claim {
	out := &Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	for _, d := range c.Devices {
		if d.Counted() {
			out.Devices = append(out.Devices, d)
		}
	}
	return out
}

// AdminOnly tells whether every device of the claim was allocated with
// adminAccess: a monitoring claim, which guarantees nothing.
func (c *Claim) AdminOnly() bool {
	for _, d := range c.Devices {
		if d.Counted() {
			return false
		}
	}
	return len(c.Devices) > 0
}

// MPS returns the claim's MPS binding, if it has shares that are MPS
// clients: the first such share's (all of them reach one daemon, see
// checkMPSPerContainer; on a node server each share's binding names its own
// GPU).
func (c *Claim) MPS() *mpslayout.Binding {
	for _, d := range c.Devices {
		if d.MPS != nil {
			return d.MPS
		}
	}
	return nil
}
