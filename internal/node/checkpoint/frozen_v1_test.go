// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package checkpoint_test

// Frozen copies of earlier releases' checkpoint decoders. They are never
// changed: they stand for the plugins a rollback brings back, and
// TestCheckpointReadByPreviousVersion feeds them what this release (and
// later schema versions) write.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// --- The first tolerant decoder (release with internal/node/checkpoint/api/v1), as
// it was written. Types and checks are copied, not imported, on purpose.

type frozenV1File struct {
	Version  int             `json:"version"`
	Checksum string          `json:"checksum"`
	Data     json.RawMessage `json:"data"`
}

type frozenV1Data struct {
	BootID string                     `json:"bootID"`
	Claims map[string]json.RawMessage `json:"claims"`
}

type frozenV1Entry struct {
	State string `json:"state"`
	Plan  struct {
		UID       string `json:"uid"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Devices   []struct {
			Request string  `json:"request"`
			Pool    string  `json:"pool"`
			Device  string  `json:"device"`
			ShareID *string `json:"shareID,omitempty"`
			GPU     struct {
				UUID                  string `json:"UUID"`
				Index                 int    `json:"Index"`
				Minor                 int    `json:"Minor"`
				ProductName           string `json:"ProductName"`
				Architecture          string `json:"Architecture"`
				Brand                 string `json:"Brand"`
				CUDAComputeCapability string `json:"CUDAComputeCapability"`
				PCIBusID              string `json:"PCIBusID"`
				PCIeRoot              string `json:"PCIeRoot"`
				MemoryBytes           uint64 `json:"MemoryBytes"`
				ComputeModes          string `json:"ComputeModes"`
			} `json:"gpu"`
			SoftLimitBytes         int64  `json:"softLimitBytes"`
			HardLimitBytes         int64  `json:"hardLimitBytes"`
			ComputeMode            string `json:"computeMode"`
			ActiveThreadPercentage *int32 `json:"activeThreadPercentage,omitempty"`
			Enforcement            string `json:"enforcement"`
			MPS                    *struct {
				GPUUUID   string `json:"gpuUUID"`
				PipeDir   string `json:"pipeDir"`
				LogDir    string `json:"logDir"`
				ShmDir    string `json:"shmDir"`
				Version   string `json:"version,omitempty"`
				Namespace string `json:"namespace,omitempty"`
			} `json:"mps,omitempty"`
		} `json:"devices"`
	} `json:"plan"`
}

// frozenV1Decode returns the understood entries and the quarantined ones
// (with their reasons).
func frozenV1Decode(raw []byte) (claims map[string]frozenV1Entry, quarantined map[string]string, err error) {
	var f frozenV1File
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, nil, fmt.Errorf("decoding checkpoint: %w", err)
	}
	if f.Version != 1 {
		return nil, nil, fmt.Errorf("checkpoint version %d; this plugin reads versions 1 to 1", f.Version)
	}
	sum := sha256.Sum256(f.Data)
	if "sha256:"+hex.EncodeToString(sum[:]) != f.Checksum {
		return nil, nil, errors.New("checksum mismatch")
	}
	var d frozenV1Data
	if err := json.Unmarshal(f.Data, &d); err != nil {
		return nil, nil, fmt.Errorf("decoding checkpoint data: %w", err)
	}
	claims, quarantined = map[string]frozenV1Entry{}, map[string]string{}
	for key, rawEntry := range d.Claims {
		var e frozenV1Entry
		if err := json.Unmarshal(rawEntry, &e); err != nil {
			quarantined[key] = err.Error()
			continue
		}
		if err := frozenV1Understood(key, &e); err != nil {
			quarantined[key] = err.Error()
			continue
		}
		claims[key] = e
	}
	return claims, quarantined, nil
}

func frozenV1Understood(key string, e *frozenV1Entry) error {
	var errs []error
	if e.State != "Started" && e.State != "Completed" {
		errs = append(errs, fmt.Errorf("state %q", e.State))
	}
	if e.Plan.UID != key || e.Plan.Namespace == "" || e.Plan.Name == "" || len(e.Plan.Devices) == 0 {
		errs = append(errs, errors.New("plan identity"))
	}
	for _, d := range e.Plan.Devices {
		if d.GPU.UUID == "" {
			errs = append(errs, errors.New("gpu.UUID"))
		}
		if d.ComputeMode != "TimeSlicing" && d.ComputeMode != "SMSharing" {
			errs = append(errs, fmt.Errorf("computeMode %q", d.ComputeMode))
		}
		if d.Enforcement != "dmem" && d.Enforcement != "mps" && d.Enforcement != "none" {
			errs = append(errs, fmt.Errorf("enforcement %q", d.Enforcement))
		}
		if d.MPS != nil && d.MPS.Version != "" && d.MPS.Version != "v3" {
			errs = append(errs, fmt.Errorf("mps.version %q", d.MPS.Version))
		}
	}
	return errors.Join(errs...)
}

// --- The strict decoder of the releases before it: unknown fields and any
// version but 1 refused, the whole file moved aside on any error.

func frozenStrictDecode(raw []byte) (map[string]frozenV1Entry, error) {
	var f frozenV1File
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decoding checkpoint: %w", err)
	}
	if f.Version != 1 {
		return nil, fmt.Errorf("checkpoint version %d, this plugin reads version 1", f.Version)
	}
	sum := sha256.Sum256(f.Data)
	if "sha256:"+hex.EncodeToString(sum[:]) != f.Checksum {
		return nil, errors.New("checksum mismatch")
	}
	var d struct {
		BootID string                   `json:"bootID"`
		Claims map[string]frozenV1Entry `json:"claims"`
	}
	dec = json.NewDecoder(strings.NewReader(string(f.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("decoding checkpoint data: %w", err)
	}
	return d.Claims, nil
}
