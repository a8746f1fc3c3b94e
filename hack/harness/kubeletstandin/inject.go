// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package kubeletstandin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/resourceclaim"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpufrac/gpufrac/internal/hook/hookarg"
)

// PodRecord is what the stand-in did for a pod that it marked Running: the
// claims the plugin prepared and, per container, what CDI injection made of
// the container's OCI spec.
type PodRecord struct {
	Namespace  string            `json:"namespace"`
	Name       string            `json:"name"`
	UID        types.UID         `json:"uid"`
	Node       string            `json:"node"`
	Claims     []PreparedClaim   `json:"claims"`
	Containers []ContainerRecord `json:"containers"`
	StartedAt  time.Time         `json:"startedAt"`
}

// PreparedClaim is one claim as NodePrepareResources answered for it.
type PreparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	UID       types.UID        `json:"uid"`
	Devices   []PreparedDevice `json:"devices"`
}

// PreparedDevice is one device of a NodePrepareResources answer, verbatim.
type PreparedDevice struct {
	RequestNames []string `json:"requestNames"`
	Pool         string   `json:"pool"`
	Device       string   `json:"device"`
	ShareID      string   `json:"shareID,omitempty"`
	CDIDeviceIDs []string `json:"cdiDeviceIDs"`
}

// ContainerRecord is a container's OCI spec after CDI injection, reduced to
// what CDI edits: environment, device nodes, mounts and hooks.
type ContainerRecord struct {
	Name        string              `json:"name"`
	Init        bool                `json:"init,omitempty"`
	CDIDevices  []string            `json:"cdiDevices"`
	Env         []string            `json:"env"`
	DeviceNodes []specs.LinuxDevice `json:"deviceNodes,omitempty"`
	Mounts      []specs.Mount       `json:"mounts,omitempty"`
	Hooks       *specs.Hooks        `json:"hooks,omitempty"`
}

// EnvValue returns the value of name in the container's environment (the
// last one wins, as in a process's environment).
func (c ContainerRecord) EnvValue(name string) (string, bool) {
	value, found := "", false
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			value, found = v, true
		}
	}
	return value, found
}

// cdiIDsFor returns the CDI device IDs of a container as the kubelet computes
// them: for each claim the container references, the devices of the named
// request (or all devices when it names none), in the order the plugin
// returned them.
func cdiIDsFor(pod *v1.Pod, container *v1.Container, prepared map[string]PreparedClaim) ([]string, error) {
	var ids []string
	for _, ref := range container.Resources.Claims {
		idx := slices.IndexFunc(pod.Spec.ResourceClaims, func(pc v1.PodResourceClaim) bool { return pc.Name == ref.Name })
		if idx < 0 {
			return nil, fmt.Errorf("container %s references pod claim %q, which the pod does not have", container.Name, ref.Name)
		}
		claimName, _, err := resourceclaim.Name(pod, &pod.Spec.ResourceClaims[idx])
		if err != nil {
			return nil, fmt.Errorf("container %s: %w", container.Name, err)
		}
		if claimName == nil {
			continue
		}
		claim, ok := prepared[*claimName]
		if !ok {
			return nil, fmt.Errorf("container %s: ResourceClaim %s was not prepared", container.Name, *claimName)
		}
		for _, d := range claim.Devices {
			if ref.Request == "" || len(d.RequestNames) == 0 || slices.Contains(d.RequestNames, resourceclaim.BaseRequestRef(ref.Request)) {
				ids = append(ids, d.CDIDeviceIDs...)
			}
		}
	}
	// Extended resources a DeviceClass maps: the container's requests in
	// the scheduler's claim (RequestMappings), as the kubelet reads them.
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil {
		claim, ok := prepared[st.ResourceClaimName]
		for _, m := range st.RequestMappings {
			if m.ContainerName != container.Name {
				continue
			}
			if !ok {
				return nil, fmt.Errorf("container %s: ResourceClaim %s was not prepared", container.Name, st.ResourceClaimName)
			}
			for _, d := range claim.Devices {
				if slices.Contains(d.RequestNames, m.RequestName) {
					ids = append(ids, d.CDIDeviceIDs...)
				}
			}
		}
	}
	return ids, nil
}

// injectContainer builds the container's OCI spec the way a runtime starts
// one (its literal environment, a PATH) and applies the CDI devices with the
// CDI library's InjectDevices, the call containerd makes.
func injectContainer(cache *cdi.Cache, refreshErr error, container *v1.Container, init bool, ids []string) (ContainerRecord, error) {
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, e := range container.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	spec := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{Args: append(slices.Clone(container.Command), container.Args...), Env: env},
		Linux:   &specs.Linux{},
	}
	rec := ContainerRecord{Name: container.Name, Init: init, CDIDevices: ids}
	if len(ids) > 0 {
		unresolved, err := cache.InjectDevices(spec, ids...)
		if err != nil {
			if refreshErr != nil {
				err = errors.Join(err, fmt.Errorf("CDI spec errors: %w", refreshErr))
			}
			return rec, fmt.Errorf("CDI device injection failed for container %s (unresolved %v): %w", container.Name, unresolved, err)
		}
	}
	// A runtime would run gpufrac's hook, which refuses a malformed limit
	// and with it the container; the stand-in runs no hook, so it parses
	// their arguments here and fails the container the same way.
	if err := checkHookArgs(spec.Hooks); err != nil {
		return rec, fmt.Errorf("container %s: %w", container.Name, err)
	}
	rec.Env = spec.Process.Env
	rec.Mounts = spec.Mounts
	rec.Hooks = spec.Hooks
	if spec.Linux != nil {
		rec.DeviceNodes = spec.Linux.Devices
	}
	return rec, nil
}

// hookProgram is the program of gpufrac's CDI hook.
const hookProgram = "gpufrac-cdi-hook"

// hookPhases lists hooks by the phase names of the OCI runtime spec's
// wire form ("prestart", "createRuntime", ...), in that order, read through
// JSON so that every phase runc may run is seen, the deprecated prestart
// among them, without naming each field.
func hookPhases(hooks *specs.Hooks) ([]string, map[string][]specs.Hook, error) {
	b, err := json.Marshal(hooks)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the OCI hooks: %w", err)
	}
	var byPhase map[string][]specs.Hook
	if err := json.Unmarshal(b, &byPhase); err != nil {
		return nil, nil, fmt.Errorf("decoding the OCI hooks: %w", err)
	}
	order := []string{"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
	for phase := range byPhase {
		if !slices.Contains(order, phase) {
			order = append(order, phase) // a phase newer than this list: still checked
		}
	}
	return order, byPhase, nil
}

// checkHookArgs parses every per-GPU limit argument (--gpu UUID=SOFT:HARD)
// of every gpufrac hook in hooks with the parser gpufrac-cdi-hook uses,
// and refuses a gpufrac hook that applies limits without any.
func checkHookArgs(hooks *specs.Hooks) error {
	if hooks == nil {
		return nil
	}
	order, byPhase, err := hookPhases(hooks)
	if err != nil {
		return err
	}
	for _, phase := range order {
		for _, h := range byPhase[phase] {
			if err := checkHook(phase, h); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkHook is checkHookArgs for one hook of phase.
func checkHook(phase string, h specs.Hook) error {
	if filepath.Base(h.Path) != hookProgram && (len(h.Args) == 0 || filepath.Base(h.Args[0]) != hookProgram) {
		return nil
	}
	limits := 0
	for i := 1; i < len(h.Args); i++ {
		value, ok := strings.CutPrefix(h.Args[i], hookarg.Flag+"=")
		if !ok && h.Args[i] == hookarg.Flag {
			if i+1 == len(h.Args) {
				return fmt.Errorf("%s hook %s %v: %s without a value", phase, h.Path, h.Args, hookarg.Flag)
			}
			i++
			value, ok = h.Args[i], true
		}
		if !ok {
			continue
		}
		if _, err := hookarg.ParseLimit(value); err != nil {
			return fmt.Errorf("%s hook %s %v: %w", phase, h.Path, h.Args, err)
		}
		limits++
	}
	if limits == 0 && len(h.Args) > 1 && h.Args[1] == "apply" {
		return fmt.Errorf("%s hook %s %v: applies no %s limit", phase, h.Path, h.Args, hookarg.Flag)
	}
	return nil
}

// injectPod injects every container of the pod, init containers first.
func injectPod(cdiRoot string, pod *v1.Pod, prepared map[string]PreparedClaim) ([]ContainerRecord, error) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiRoot), cdi.WithAutoRefresh(false))
	if err != nil && cache == nil {
		return nil, fmt.Errorf("creating the CDI cache for %s: %w", cdiRoot, err)
	}
	// Refresh reports problems of any spec in the directory; like
	// containerd, only those that break this pod's devices fail it.
	refreshErr := cache.Refresh()
	var out []ContainerRecord
	for _, list := range []struct {
		containers []v1.Container
		init       bool
	}{{pod.Spec.InitContainers, true}, {pod.Spec.Containers, false}} {
		for i := range list.containers {
			c := &list.containers[i]
			ids, err := cdiIDsFor(pod, c, prepared)
			if err != nil {
				return nil, err
			}
			rec, err := injectContainer(cache, refreshErr, c, list.init, ids)
			if err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
	}
	return out, nil
}

// writeRecord stores the record as <dir>/<namespace>_<name>.json.
func writeRecord(dir string, rec *PodRecord) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the record of pod %s/%s: %w", rec.Namespace, rec.Name, err)
	}
	path := recordPath(dir, rec.Namespace, rec.Name)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("renaming %s: %w", tmp, err)
	}
	return nil
}

func removeRecord(dir, namespace, name string) {
	if dir != "" {
		_ = os.Remove(recordPath(dir, namespace, name))
	}
}

func recordPath(dir, namespace, name string) string {
	return filepath.Join(dir, namespace+"_"+name+".json")
}
