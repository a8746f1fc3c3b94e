// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package prombin

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Scrape is one target's exposition text (Prometheus's text format) as a
// scrape at At would read it.
type Scrape struct {
	At  time.Duration
	Job string
	// Instance is the instance label Prometheus would add; empty, the job.
	Instance string
	Text     []byte
}

// InputSeries turns scrapes taken every interval into promtool input series,
// labelled as a Prometheus scrape labels them: job and instance added (a
// target's own job or instance label kept as exported_job or
// exported_instance, honor_labels being false), histograms and summaries
// expanded into their _bucket, _sum and _count series, an up series per
// target, and a staleness marker where a series leaves a target's scrape.
// Each scrape's At must be a multiple of interval.
func InputSeries(interval time.Duration, scrapes []Scrape) ([]Series, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("interval %s: must be positive", interval)
	}
	type history map[int]string // step → value
	all := map[string]history{}
	steps := 0
	// For staleness: a series missing from a later scrape of its target
	// is stale there, as it is in Prometheus; a step without a scrape of
	// the target is only a gap.
	seriesTarget := map[string]string{}
	targetSteps := map[string]map[int]bool{}
	for _, s := range scrapes {
		if s.At%interval != 0 || s.At < 0 {
			return nil, fmt.Errorf("scrape of %s at %s: not a multiple of the interval %s", s.Job, s.At, interval)
		}
		step := int(s.At / interval)
		steps = max(steps, step+1)
		instance := s.Instance
		if instance == "" {
			instance = s.Job
		}
		samples, err := parse(s.Text, s.Job, instance)
		if err != nil {
			return nil, fmt.Errorf("scrape of %s at %s: %w", s.Job, s.At, err)
		}
		target := s.Job + "/" + instance
		if targetSteps[target] == nil {
			targetSteps[target] = map[int]bool{}
		}
		targetSteps[target][step] = true
		for _, smp := range samples {
			key := smp.Metric.String()
			if all[key] == nil {
				all[key] = history{}
			}
			if _, dup := all[key][step]; dup {
				return nil, fmt.Errorf("scrape of %s at %s: series %s twice", s.Job, s.At, key)
			}
			all[key][step] = formatValue(float64(smp.Value))
			seriesTarget[key] = target
		}
	}
	out := make([]Series, 0, len(all))
	for key, h := range all {
		vals := make([]string, steps)
		seen, stale := false, false
		for i := range vals {
			v, ok := h[i]
			switch {
			case ok:
				vals[i], seen, stale = v, true, false
			case seen && !stale && targetSteps[seriesTarget[key]][i]:
				// The target answered without this series.
				vals[i], stale = "stale", true
			default:
				vals[i] = "_"
			}
		}
		out = append(out, Series{Series: key, Values: strings.Join(vals, " ")})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Series < out[j].Series })
	return out, nil
}

// parse reads one exposition text into samples labelled as a scrape of
// job/instance labels them, plus the target's up series.
func parse(text []byte, job, instance string) (model.Vector, error) {
	out, err := Samples(text)
	if err != nil {
		return nil, err
	}
	out = append(out, &model.Sample{Metric: model.Metric{model.MetricNameLabel: "up"}, Value: 1})
	for _, s := range out {
		for _, l := range []model.LabelName{model.JobLabel, model.InstanceLabel} {
			if v, ok := s.Metric[l]; ok {
				s.Metric[model.ExportedLabelPrefix+l] = v
			}
		}
		s.Metric[model.JobLabel] = model.LabelValue(job)
		s.Metric[model.InstanceLabel] = model.LabelValue(instance)
	}
	return out, nil
}

// Samples reads one exposition text (Prometheus's text format) into its
// samples, as their target exposes them (no job or instance label);
// histograms and summaries expanded into their _bucket, _sum and _count
// series.
func Samples(text []byte) (model.Vector, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing the exposition text: %w", err)
	}
	names := make([]string, 0, len(fams))
	for n := range fams {
		names = append(names, n)
	}
	sort.Strings(names)
	var out model.Vector
	for _, n := range names {
		vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, fams[n])
		if err != nil {
			return nil, fmt.Errorf("metric family %s: %w", n, err)
		}
		out = append(out, vec...)
	}
	return out, nil
}

// formatValue writes a sample value in promtool's series notation.
func formatValue(v float64) string {
	switch {
	case math.IsNaN(v):
		return "NaN"
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
