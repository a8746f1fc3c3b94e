// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package admission

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/gpufrac/gpufrac/internal/safetext"
)

// Bounds on what an admission request may send and a response may say.
const (
	// MaxBodyBytes: the API server sends objects of at most 3 MiB
	// (k8s.io/apiserver MaxRequestBodyBytes, documented); an
	// AdmissionReview carries the object and, on update, the old one, plus
	// their metadata: 8 MiB holds both with room (inferred).
	MaxBodyBytes = 8 << 20
	// MaxMessageBytes caps a denial's message, MaxWarningBytes each
	// warning, MaxWarnings their number, MaxProblems the problems one
	// denial lists: each is read by a person at a terminal.
	MaxMessageBytes = 4096
	MaxWarningBytes = 512
	MaxWarnings     = 20
	MaxProblems     = 20
)

// readBody reads at most MaxBodyBytes of an admission request.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is over %d MiB, the most an AdmissionReview may hold here", MaxBodyBytes>>20)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("reading the request: %w", err)
	}
	return body, http.StatusOK, nil
}

// bounded escapes and caps what a response says: its message and warnings
// repeat names and values from the object, which a person reads at a
// terminal (kubectl prints both).
func bounded(resp *admissionv1.AdmissionResponse) {
	if resp.Result != nil {
		resp.Result.Message = safetext.Cap(safetext.Escape(resp.Result.Message), MaxMessageBytes)
	}
	if len(resp.Warnings) == 0 {
		return
	}
	out := make([]string, 0, min(len(resp.Warnings), MaxWarnings+1))
	for _, w := range resp.Warnings {
		out = append(out, safetext.Cap(safetext.Escape(w), MaxWarningBytes))
	}
	resp.Warnings = safetext.LimitLines(out, MaxWarnings, "warnings")
}

// problemList joins problems for a denial: at most MaxProblems of them,
// and only as many as fit a message, with a count of the rest.
func problemList(problems []string) string {
	budget := MaxMessageBytes - 256 // room for the prefix and the count
	n, size := 0, 0
	for n < len(problems) && n < MaxProblems && (n == 0 || size+len(problems[n])+2 <= budget) {
		size += len(problems[n]) + 2
		n++
	}
	out := strings.Join(problems[:n], "; ")
	if n < len(problems) {
		out += fmt.Sprintf("; ... and %d more problems, not listed", len(problems)-n)
	}
	return out
}
