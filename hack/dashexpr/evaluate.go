// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package dashexpr

import (
	"context"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/prometheus/common/model"
)

// Querier evaluates a range query; hack/prombin's Server is one.
type Querier interface {
	QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, error)
}

// Result is one query as Prometheus evaluated it over a time range, as
// a dashboard's time range shows it.
type Result struct {
	Query
	// Series is how many series had a value at some point of the range.
	Series int
	// NonZero is how many of them had a value other than 0 and NaN at
	// some point.
	NonZero int
	Err     error
}

// Evaluate runs every query against q from start to end every step.
func Evaluate(ctx context.Context, q Querier, queries []Query, start, end time.Time, step time.Duration) []Result {
	out := make([]Result, 0, len(queries))
	for _, query := range queries {
		r := Result{Query: query}
		m, err := q.QueryRange(ctx, query.Expr, start, end, step)
		if err != nil {
			r.Err = err
			out = append(out, r)
			continue
		}
		for _, s := range m {
			if len(s.Values) == 0 {
				continue
			}
			r.Series++
			for _, p := range s.Values {
				if x := float64(p.Value); x != 0 && !math.IsNaN(x) {
					r.NonZero++
					break
				}
			}
		}
		out = append(out, r)
	}
	return out
}

// WriteTable writes one line per query: panel, refId, series and non-zero
// series returned, or the error.
func WriteTable(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PANEL\tQUERY\tSERIES\tNON-ZERO\t")
	for _, r := range results {
		if r.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\terror: %v\t\t\n", r.Panel, r.RefID, r.Err)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t\n", r.Panel, r.RefID, r.Series, r.NonZero)
	}
	return tw.Flush()
}
