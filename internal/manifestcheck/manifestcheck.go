// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package manifestcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/api/gpufrac.dev/v1alpha1"
	"github.com/gpufrac/gpufrac/internal/safetext"
	"github.com/gpufrac/gpufrac/internal/yamldocs"
)

// Input is one source of manifests.
type Input struct {
	// Name identifies the source in error lines: a file name, or "<stdin>".
	Name string
	Data []byte
}

// Result is the verdict on one object, or on a document that could not be
// read as one.
type Result struct {
	Source   string // Input.Name
	Document int    // 1-based position among the non-empty documents of Source
	Kind     string
	Name     string

	// Ignored objects are not ours to check; Note may say why.
	Ignored bool
	Note    string
	// Err is set when the document could not be decoded at all.
	Err error
	// Problems are the objects's problems, with paths inside the object.
	Problems field.ErrorList
}

// Failed reports whether the result is an error or has problems.
func (r Result) Failed() bool { return r.Err != nil || len(r.Problems) > 0 }

// Lines renders the result the way `kubectl gpufrac validate` prints it:
//
//	<Kind>/<name>: valid
//	<Kind>/<name>: <field path>: <reason>      (one line per problem)
//	<Kind>/<name>: ignored[ (<note>)]
//	<source>: document <n>: [<Kind>/<name>: ]<error>
//
// Names and messages come from the manifest, so every line is escaped
// (safetext) and kept to MaxLineBytes, and at most MaxProblems problems are
// listed per object, with a count of the rest.
func (r Result) Lines() []string { return r.LinesUpTo(MaxProblems) }

// LinesUpTo is Lines listing at most n problems.
func (r Result) LinesUpTo(n int) []string {
	lines := r.lines(n)
	for i := range lines {
		lines[i] = safetext.Cap(safetext.Escape(lines[i]), MaxLineBytes)
	}
	return lines
}

// Output bounds: one problem's line, and the problems listed per object.
const (
	MaxLineBytes = 512
	MaxProblems  = 20
)

func (r Result) lines(most int) []string {
	obj := r.Kind + "/" + r.Name
	switch {
	case r.Err != nil && r.Document == 0:
		return []string{r.Source + ": " + oneLine(r.Err.Error())}
	case r.Err != nil:
		prefix := fmt.Sprintf("%s: document %d: ", r.Source, r.Document)
		if r.Kind != "" {
			prefix += obj + ": "
		}
		return []string{prefix + oneLine(r.Err.Error())}
	case r.Ignored && r.Note != "":
		return []string{obj + ": ignored (" + r.Note + ")"}
	case r.Ignored:
		return []string{obj + ": ignored"}
	case len(r.Problems) == 0:
		return []string{obj + ": valid"}
	}
	lines := make([]string, 0, len(r.Problems))
	for _, e := range r.Problems {
		if e.Field == "" {
			lines = append(lines, obj+": "+oneLine(e.ErrorBody()))
		} else {
			lines = append(lines, obj+": "+e.Field+": "+oneLine(e.ErrorBody()))
		}
	}
	if len(lines) > most {
		lines = append(lines[:most:most], fmt.Sprintf("%s: ... and %d more problems, not listed", obj, len(lines)-most))
	}
	return lines
}

// MaxInputBytes bounds one input (a file, standard input). The API server
// refuses a request body over 3 MiB (k8s.io/apiserver, MaxRequestBodyBytes,
// documented), so one object is smaller; 32 MiB holds the rendered
// manifests of a large chart many times over (inferred), and refuses
// /dev/zero or an endless pipe before it exhausts memory.
const MaxInputBytes = 32 << 20

// ReadLimited reads all of r, at most MaxInputBytes of it.
func ReadLimited(r io.Reader, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(data) > MaxInputBytes {
		return nil, fmt.Errorf("reading %s: more than %d MiB, the most one input may hold (split it)", name, MaxInputBytes>>20)
	}
	return data, nil
}

// CheckReader reads all of r (at most MaxInputBytes) and checks it as one
// input.
func CheckReader(r io.Reader, name string) ([]Result, error) {
	data, err := ReadLimited(r, name)
	if err != nil {
		return nil, err
	}
	return Check(Input{Name: name, Data: data}), nil
}

// Options are what Check judges quantities against.
type Options struct {
	// GPUMemorySizes are the memory sizes of the cluster's gpufrac GPUs;
	// no memory request or limit may exceed the largest. When empty, the
	// largest GPU of gpufrac's simulated catalog bounds them
	// (v1alpha1.LargestGPU), and the problem says which bound applied.
	GPUMemorySizes []resource.Quantity
}

// Check checks every object of every input and returns one result per
// object (or per undecodable document), in input order.
//
// Inputs are checked together: a claim config that leaves computeMode unset
// is judged under the mode that the configs of its requests' DeviceClasses
// set, when those classes are among the inputs, exactly as the driver will
// merge them. A class that is not among the inputs counts as setting no
// mode (TimeSlicing), so pass the classes along to check a claim that
// relies on, say, sm-sharing.gpufrac.dev.
//
// A request's memory is bounded by gpufrac's largest GPU when the request
// is gpufrac's: a gpufrac.dev claim config covers it, or its class
// selects gpufrac's devices (deviceclass.SelectsGpufrac) when the class is
// among the inputs, or is named as gpufrac's shipped classes are
// (deviceclass.NamedAsShipped) when it is not.
//
// An input with no object at all is an error: an empty file or pipe is
// more likely a mistake upstream (a failed `helm template`) than a wish to
// check nothing.
func Check(inputs ...Input) []Result { return CheckWith(Options{}, inputs...) }

// CheckWith is Check with the cluster's GPU sizes as the memory bound.
func CheckWith(opts Options, inputs ...Input) []Result {
	var b bound
	b.largest, b.source = v1alpha1.LargestGPU(opts.GPUMemorySizes)
	var objs []*parsed
	for _, in := range inputs {
		found := parse(in)
		if len(found) == 0 {
			found = []*parsed{{Result: Result{Source: in.Name, Err: errors.New("no Kubernetes object in this input: it is empty or holds only comments")}}}
		}
		objs = append(objs, found...)
	}

	classes := newClassConfigs()
	for _, o := range objs {
		if dc, ok := o.obj.(*resourceapi.DeviceClass); ok {
			classes.add(dc)
		}
	}

	results := make([]Result, 0, len(objs))
	for _, o := range objs {
		switch obj := o.obj.(type) {
		case *resourceapi.DeviceClass:
			o.Problems = append(o.Problems, checkDeviceClass(obj, b)...)
		case *resourceapi.ResourceClaim:
			o.Problems = append(o.Problems, checkClaimSpec(&obj.Spec, field.NewPath("spec"), classes, b)...)
		case *resourceapi.ResourceClaimTemplate:
			o.Problems = append(o.Problems, checkClaimSpec(&obj.Spec.Spec, field.NewPath("spec", "spec"), classes, b)...)
		}
		results = append(results, o.Result)
	}
	return results
}

// parsed is a Result on its way: obj is the typed object to check, nil
// when there is nothing to check.
type parsed struct {
	Result
	obj runtime.Object
}

// header is what is read of a document before deciding whether to decode
// it: most kinds are not ours, and decoding them strictly would report
// problems that are none of our business.
type header struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name         string `json:"name"`
		GenerateName string `json:"generateName"`
	} `json:"metadata"`
	Items []json.RawMessage `json:"items"`
}

func parse(in Input) []*parsed {
	var out []*parsed
	doc := 1
	for chunk, err := range yamldocs.All(in.Data) {
		if err != nil {
			// The reader cannot resynchronise after a broken separator.
			return append(out, &parsed{Result: Result{Source: in.Name, Document: doc, Err: err}})
		}
		// Strict: a key given twice in YAML leaves it to chance which
		// value the API server keeps, so such a document is refused.
		data, err := yaml.YAMLToJSONStrict(chunk)
		if err != nil {
			out = append(out, &parsed{Result: Result{Source: in.Name, Document: doc, Err: err}})
			doc++
			continue
		}
		if d := bytes.TrimSpace(data); len(d) == 0 || bytes.Equal(d, []byte("null")) {
			continue // only comments, or a separator with nothing after it
		}
		out = append(out, parseObject(in.Name, doc, data, nil)...)
		doc++
	}
	return out
}

// parseObject reads one object, or the items of a List. list is the
// enclosing list's header, if any.
func parseObject(source string, doc int, data []byte, list *header) []*parsed {
	res := &parsed{Result: Result{Source: source, Document: doc}}
	var h header
	if d := bytes.TrimSpace(data); len(d) == 0 || d[0] != '{' {
		res.Err = errors.New("not a Kubernetes object: expected a mapping with apiVersion, kind and metadata")
		return []*parsed{res}
	}
	if err := json.Unmarshal(data, &h); err != nil {
		res.Err = fmt.Errorf("not a Kubernetes object: %w", err)
		return []*parsed{res}
	}
	if h.Kind == "" && list != nil && strings.HasSuffix(list.Kind, "List") && list.Kind != "List" {
		// Items of a typed list (ResourceClaimList) may leave out their
		// apiVersion and kind: they are the list's.
		h.APIVersion, h.Kind = list.APIVersion, strings.TrimSuffix(list.Kind, "List")
		var err error
		if data, err = withTypeMeta(data, h.APIVersion, h.Kind); err != nil {
			res.Err = err
			return []*parsed{res}
		}
	}
	if list == nil && strings.HasSuffix(h.Kind, "List") && h.Items != nil {
		var out []*parsed
		for _, item := range h.Items {
			out = append(out, parseObject(source, doc, item, &h)...)
		}
		return out
	}

	res.Kind, res.Name = h.Kind, h.Metadata.Name
	if res.Name == "" {
		res.Name = h.Metadata.GenerateName
	}
	if h.Kind == "" {
		res.Err = errors.New("not a Kubernetes object: kind is not set")
		return []*parsed{res}
	}

	gv, _, _ := strings.Cut(h.APIVersion, "/")
	switch {
	case h.APIVersion == "" && checkedKinds[h.Kind]:
		// Without an apiVersion the kind could be anyone's: say so
		// rather than pass it silently as checked.
		res.Ignored = true
		res.Note = "no apiVersion: checked are only resource.k8s.io/v1 ResourceClaim, ResourceClaimTemplate and DeviceClass; add apiVersion: resource.k8s.io/v1"
		return []*parsed{res}
	case gv != resourceapi.GroupName || !checkedKinds[h.Kind]:
		res.Ignored = true
		return []*parsed{res}
	case h.APIVersion != resourceapi.SchemeGroupVersion.String():
		res.Ignored = true
		res.Note = fmt.Sprintf("only %s is checked, not %s", resourceapi.SchemeGroupVersion, h.APIVersion)
		return []*parsed{res}
	}

	if n := v1alpha1.FindUnboundedQuantity(data); n != "" {
		// Decoding would parse it into a resource.Quantity for minutes.
		res.Err = fmt.Errorf("the number %s has an exponent outside [-%d, %d]: no quantity needs it, and arithmetic on it takes minutes",
			safetext.Cap(n, 64), v1alpha1.MaxQuantityExponent, v1alpha1.MaxQuantityExponent)
		return []*parsed{res}
	}
	obj, _, err := strictDecoder.Decode(data, nil, nil)
	if strict, ok := runtime.AsStrictDecodingError(err); ok {
		// The object decoded; only its strictness failed. A misspelled
		// field (say `capcity`) would otherwise drop the memory request
		// without a word, so it is reported, and the object still checked.
		res.Problems = append(res.Problems, strictProblems(strict.Errors())...)
	} else if err != nil {
		res.Err = err
		return []*parsed{res}
	}
	res.obj = obj
	return []*parsed{res}
}

var checkedKinds = map[string]bool{"ResourceClaim": true, "ResourceClaimTemplate": true, "DeviceClass": true}

var strictDecoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Strict: true})

func withTypeMeta(data []byte, apiVersion, kind string) ([]byte, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	m["apiVersion"], m["kind"] = apiVersion, kind
	return json.Marshal(m)
}

// strictProblems turns the decoder's `unknown field "spec.a.b"` into a
// problem at spec.a naming b, the same shape v1alpha1.Decode reports
// unknown fields in a FractionConfig.
func strictProblems(errs []error) field.ErrorList {
	var out field.ErrorList
	for _, err := range errs {
		var fe interface{ FieldPath() string }
		if !errors.As(err, &fe) {
			out = append(out, field.Forbidden(nil, err.Error()))
			continue
		}
		what, _, _ := strings.Cut(err.Error(), ` "`)
		path := fe.FieldPath()
		parent, leaf := "", path
		if i := strings.LastIndexByte(path, '.'); i >= 0 {
			parent, leaf = path[:i], path[i+1:]
		}
		out = append(out, &field.Error{Type: field.ErrorTypeForbidden, Field: parent, BadValue: "",
			Detail: what + " " + strconv.Quote(leaf)})
	}
	return out
}

// oneLine keeps one problem on one line, so that output can be grepped and
// counted; YAML errors come in several.
func oneLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return strings.Join(lines, " ")
}
