// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Decode reads the JSON parameters of an opaque config (as found in
// OpaqueDeviceConfiguration.Parameters.Raw) into a FractionConfig.
//
// Decoding is strict: unknown fields, duplicate fields, values of the wrong
// type, and a missing or wrong apiVersion or kind are all errors, reported
// under fldPath (the path of the parameters in the enclosing object). Field
// names are matched case-sensitively, as the Kubernetes API does.
//
// Decode does not stop at the first problem: it reports every one it finds,
// so that a user fixes a config in one round trip. For the same reason the
// returned config is non-nil whenever data is a JSON object, even if there
// are errors; it then holds the fields that did decode, which lets callers
// run Validate on it to report the remaining problems too. A caller that
// acts on a config must check the errors first.
//
// Decode neither defaults nor validates the values it reads.
func Decode(data []byte, fldPath *field.Path) (*FractionConfig, field.ErrorList) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || bytes.Equal(data, []byte("null")) {
		return nil, field.ErrorList{field.Required(fldPath,
			fmt.Sprintf("a %s object of apiVersion %s is required", Kind, APIVersion))}
	}

	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, field.ErrorList{invalidJSON(fldPath, err)}
	}

	cfg := &FractionConfig{}
	var errs field.ErrorList
	seen, failed := map[string]bool{}, map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, append(errs, invalidJSON(fldPath, err))
		}
		key, _ := tok.(string) // inside an object the decoder only yields string keys
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, append(errs, invalidJSON(fldPath, err))
		}

		decodeField, known := fieldDecoders[key]
		switch {
		case !known && seen[key]:
			// Already reported as unknown; once is enough.
		case !known:
			seen[key] = true
			errs = append(errs, field.Forbidden(fldPath, fmt.Sprintf("unknown field %q", key)))
		case seen[key]:
			// A second value would silently override the first one, and which
			// of the two the author meant is anybody's guess.
			errs = append(errs, field.Forbidden(fldPath, fmt.Sprintf("duplicate field %q", key)))
		default:
			seen[key] = true
			if bytes.Equal(raw, []byte("null")) {
				continue // null means unset, as everywhere in the Kubernetes API
			}
			if err := decodeField(cfg, raw, fldPath.Child(key)); err != nil {
				errs = append(errs, err)
				failed[key] = true
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, append(errs, invalidJSON(fldPath, err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, append(errs, invalidJSON(fldPath, errors.New("unexpected data after the top-level object")))
	}

	errs = append(errs, checkTypeMeta(cfg, failed, fldPath)...)
	return cfg, errs
}

// checkTypeMeta requires the apiVersion and kind, so that a config written
// for another version of this API is refused instead of misread. An empty
// value counts as missing, as it does in the Kubernetes API; a value that did
// not decode has already been reported.
func checkTypeMeta(cfg *FractionConfig, failed map[string]bool, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	check := func(name, got, want string) {
		switch {
		case failed[name]:
		case got == "":
			errs = append(errs, field.Required(fldPath.Child(name), fmt.Sprintf("must be %q", want)))
		case got != want:
			errs = append(errs, field.NotSupported(fldPath.Child(name), got, []string{want}))
		}
	}
	check("apiVersion", cfg.APIVersion, APIVersion)
	check("kind", cfg.Kind, Kind)
	return errs
}

// fieldDecoders is the list of known fields, in the order they are
// documented. A test checks it against the json tags of FractionConfig, so
// a field added to the type cannot be forgotten here.
var fieldDecoders = map[string]func(cfg *FractionConfig, raw json.RawMessage, p *field.Path) *field.Error{
	"apiVersion": func(cfg *FractionConfig, raw json.RawMessage, p *field.Path) *field.Error {
		return decodeString(raw, p, &cfg.APIVersion)
	},
	"kind": func(cfg *FractionConfig, raw json.RawMessage, p *field.Path) *field.Error {
		return decodeString(raw, p, &cfg.Kind)
	},
	"memoryLimit": func(cfg *FractionConfig, raw json.RawMessage, p *field.Path) *field.Error {
		// Quantity accepts both "40Gi" and a bare number of bytes, like
		// every quantity in the Kubernetes API.
		// The text is bounded before it is parsed (ParseQuantity).
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			var n json.Number
			if json.Unmarshal(raw, &n) != nil {
				return field.Invalid(p, rawValue(raw), "must be a quantity, e.g. 40Gi, or a number of bytes")
			}
			text = n.String()
		}
		q, err := ParseQuantity(text)
		if err != nil {
			return field.Invalid(p, rawValue(raw), err.Error())
		}
		cfg.MemoryLimit = &q
		return nil
	},
	"computeMode": func(cfg *FractionConfig, raw json.RawMessage, p *field.Path) *field.Error {
		var s string
		if err := decodeString(raw, p, &s); err != nil {
			return err
		}
		cfg.ComputeMode = ComputeMode(s)
		return nil
	},
	"activeThreadPercentage": func(cfg *FractionConfig, raw json.RawMessage, p *field.Path) *field.Error {
		var n json.Number
		if err := json.Unmarshal(raw, &n); err != nil || len(raw) == 0 || raw[0] == '"' {
			return field.Invalid(p, rawValue(raw), "must be an integer")
		}
		i, err := n.Int64()
		if err != nil {
			return field.Invalid(p, rawValue(raw), "must be an integer")
		}
		if i < math.MinInt32 || i > math.MaxInt32 {
			// It is an integer, just not one that fits: say what would.
			return field.Invalid(p, i, atpRangeDetail)
		}
		v := int32(i)
		cfg.ActiveThreadPercentage = &v
		return nil
	},
}

func decodeString(raw json.RawMessage, p *field.Path, into *string) *field.Error {
	if err := json.Unmarshal(raw, into); err != nil {
		return field.Invalid(p, rawValue(raw), "must be a string")
	}
	return nil
}

// rawValue turns a JSON value back into a Go value so that field.Error
// prints it the way the user wrote it: strings quoted, numbers bare.
func rawValue(raw json.RawMessage) any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return i
		}
		return n.String()
	}
	return v
}

func invalidJSON(fldPath *field.Path, err error) *field.Error {
	detail := fmt.Sprintf("must be a JSON object (a %s)", Kind)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		detail = fmt.Sprintf("not valid JSON at byte %d: %v", syntax.Offset, err)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		detail = "not valid JSON: unexpected end of input"
	case err != nil:
		detail = "not valid JSON: " + err.Error()
	}
	return &field.Error{Type: field.ErrorTypeInvalid, Field: fldPath.String(), BadValue: field.OmitValueType{}, Detail: detail}
}
