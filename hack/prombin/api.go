// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package prombin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
)

// Query evaluates expr at the server's now (GET /api/v1/query) and returns
// its result: a model.Vector, model.Matrix, *model.Scalar or *model.String.
func (s *Server) Query(ctx context.Context, expr string) (model.Value, error) {
	var data struct {
		Type   model.ValueType `json:"resultType"`
		Result json.RawMessage `json:"result"`
	}
	if err := s.get(ctx, "/api/v1/query", url.Values{"query": {expr}}, &data); err != nil {
		return nil, err
	}
	return decodeResult(data.Type, data.Result)
}

// QueryVector is Query for an expression whose result is an instant vector.
func (s *Server) QueryVector(ctx context.Context, expr string) (model.Vector, error) {
	v, err := s.Query(ctx, expr)
	if err != nil {
		return nil, err
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("%s: result is a %s, not a vector", expr, v.Type())
	}
	return vec, nil
}

// QueryRange evaluates expr from start to end every step (GET
// /api/v1/query_range), as a dashboard's graph panel does.
func (s *Server) QueryRange(ctx context.Context, expr string, start, end time.Time, step time.Duration) (model.Matrix, error) {
	var data struct {
		Type   model.ValueType `json:"resultType"`
		Result json.RawMessage `json:"result"`
	}
	params := url.Values{
		"query": {expr},
		"start": {strconv.FormatFloat(float64(start.UnixMilli())/1000, 'f', 3, 64)},
		"end":   {strconv.FormatFloat(float64(end.UnixMilli())/1000, 'f', 3, 64)},
		"step":  {strconv.FormatFloat(step.Seconds(), 'f', -1, 64)},
	}
	if err := s.get(ctx, "/api/v1/query_range", params, &data); err != nil {
		return nil, err
	}
	v, err := decodeResult(data.Type, data.Result)
	if err != nil {
		return nil, err
	}
	m, ok := v.(model.Matrix)
	if !ok {
		return nil, fmt.Errorf("%s: range result is a %s, not a matrix", expr, v.Type())
	}
	return m, nil
}

func decodeResult(t model.ValueType, raw json.RawMessage) (model.Value, error) {
	var v model.Value
	switch t {
	case model.ValVector:
		v = &model.Vector{}
	case model.ValMatrix:
		v = &model.Matrix{}
	case model.ValScalar:
		v = &model.Scalar{}
	case model.ValString:
		v = &model.String{}
	default:
		return nil, fmt.Errorf("unknown result type %q", t)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return nil, fmt.Errorf("decoding a %s result: %w", t, err)
	}
	switch x := v.(type) {
	case *model.Vector:
		return *x, nil
	case *model.Matrix:
		return *x, nil
	}
	return v, nil
}

// Alert is one alert of GET /api/v1/alerts: pending or firing.
type Alert struct {
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
	State       string            `json:"state"`
	ActiveAt    time.Time         `json:"activeAt"`
	Value       string            `json:"value"`
}

// Alerts lists the server's active (pending and firing) alerts.
func (s *Server) Alerts(ctx context.Context) ([]Alert, error) {
	var data struct {
		Alerts []Alert `json:"alerts"`
	}
	if err := s.get(ctx, "/api/v1/alerts", nil, &data); err != nil {
		return nil, err
	}
	return data.Alerts, nil
}

// TargetHealth is one active target of GET /api/v1/targets.
type TargetHealth struct {
	Labels     map[string]string `json:"labels"`
	ScrapeURL  string            `json:"scrapeUrl"`
	Health     string            `json:"health"`
	LastError  string            `json:"lastError"`
	LastScrape time.Time         `json:"lastScrape"`
}

// Targets lists the server's active targets and how their last scrape went.
func (s *Server) Targets(ctx context.Context) ([]TargetHealth, error) {
	var data struct {
		Active []TargetHealth `json:"activeTargets"`
	}
	if err := s.get(ctx, "/api/v1/targets", url.Values{"state": {"active"}}, &data); err != nil {
		return nil, err
	}
	return data.Active, nil
}

// WaitScraped waits until the server has scraped every one of its want
// targets successfully at least once, or says which is not up.
func (s *Server) WaitScraped(ctx context.Context, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		targets, err := s.Targets(ctx)
		if err != nil {
			return err
		}
		up := 0
		var last string
		for _, tg := range targets {
			if tg.Health == "up" {
				up++
			} else {
				last = fmt.Sprintf("%s is %s (%s)", tg.ScrapeURL, tg.Health, tg.LastError)
			}
		}
		if up >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d targets up after %s; %s", up, want, timeout, last)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
