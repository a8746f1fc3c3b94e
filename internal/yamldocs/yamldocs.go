// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package yamldocs reads a multi-document YAML (or JSON) stream one
// document at a time, as kubectl and the API machinery read a file: the
// one reader for every manifest, workload and reference file gpufrac and
// its tests read.
package yamldocs

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"iter"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// All yields the documents of data in order, each its raw text: what lies
// between lines that begin with "---" (k8s.io/apimachinery's YAMLReader,
// which ends every line, the last included, with a newline). A separator
// that opens the stream stays at the head of the first document, where
// YAML reads it as the document's start; any other separator with nothing
// before it yields nothing. A document of comments alone is yielded (Blank
// tells it apart). A read error (a separator followed by more than a
// comment) is yielded last, with a nil document: the reader cannot find
// the next document after it.
func All(data []byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		for {
			doc, err := reader.Read()
			if errors.Is(err, io.EOF) {
				return
			}
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(doc, nil) {
				return
			}
		}
	}
}

// Blank reports whether doc holds nothing but white space, comment lines
// and document separators: no YAML node.
func Blank(doc []byte) bool {
	for line := range strings.SplitSeq(string(doc), "\n") {
		if rest, ok := strings.CutPrefix(line, "---"); ok {
			line = rest // a separator, perhaps with a comment
		}
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}
