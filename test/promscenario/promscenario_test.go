// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package promscenario

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// parse reads one scrape as Prometheus would.
func parse(name string, step int, target Target) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(target.Text))
	if err != nil {
		return nil, fmt.Errorf("%s step %d, %s: the exposition does not parse: %w", name, step, target.Job, err)
	}
	return families, nil
}

// series are one family's samples of every target of one step, each as
// its labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

func series(families []map[string]*dto.MetricFamily, name string) []sample {
	var out []sample
	for _, fams := range families {
		f := fams[name]
		if f == nil {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			v := m.GetGauge().GetValue()
			if f.GetType() == dto.MetricType_COUNTER {
				v = m.GetCounter().GetValue()
			}
			out = append(out, sample{l, v})
		}
	}
	return out
}

// built holds each scenario's steps, parsed.
type built struct {
	sc    Scenario
	steps [][]map[string]*dto.MetricFamily
}

// builtOnce holds every scenario, built once for all the tests of the
// package (each build scrapes the registries some 500 times).
var builtOnce struct {
	sync.Once
	all map[string]built
	err error
}

func buildAll(t *testing.T) map[string]built {
	t.Helper()
	builtOnce.Do(func() {
		builtOnce.all, builtOnce.err = buildEvery(context.Background())
	})
	if builtOnce.err != nil {
		t.Fatal(builtOnce.err)
	}
	return builtOnce.all
}

func buildEvery(ctx context.Context) (map[string]built, error) {
	out := map[string]built{}
	for _, name := range Names() {
		sc, err := Build(ctx, name)
		if err != nil {
			return nil, err
		}
		b := built{sc: sc}
		for i, st := range sc.Steps {
			var fams []map[string]*dto.MetricFamily
			for _, target := range st.Targets {
				f, err := parse(name, i, target)
				if err != nil {
					return nil, err
				}
				fams = append(fams, f)
			}
			b.steps = append(b.steps, fams)
		}
		out[name] = b
	}
	return out, nil
}

// TestEveryScenarioParsesAndKeepsItsPromises: every scenario the consumers
// name builds; every step has two plugin targets and the controller, a
// minute apart, and parses as Prometheus's text format; the families the
// scenario promises are in its last step (a metric renamed in the code
// fails here, and in the alert and dashboard tests that read it).
func TestEveryScenarioParsesAndKeepsItsPromises(t *testing.T) {
	want := []string{"at-hard-limit", "borrowing-near-full", "healthy", "mps-daemon-not-ready", "prepare-errors",
		"quarantined-checkpoint", "repeated-evictions", "unhealthy-gpu-with-claims"}
	for _, n := range want {
		if !slices.Contains(Names(), n) {
			t.Errorf("Names() %v lacks %q", Names(), n)
		}
	}
	if _, err := Build(context.Background(), "no-such"); err == nil {
		t.Error("Build of an unknown scenario succeeded")
	}
	for name, b := range buildAll(t) {
		if b.sc.Name != name || b.sc.Interval != time.Minute || len(b.sc.Steps) < 10 {
			t.Errorf("%s: name %q, interval %s, %d steps", name, b.sc.Name, b.sc.Interval, len(b.sc.Steps))
		}
		for i, st := range b.sc.Steps {
			jobs := []string{}
			for _, target := range st.Targets {
				jobs = append(jobs, target.Job)
			}
			if st.At != time.Duration(i)*time.Minute || !slices.Equal(jobs, []string{JobPlugin, JobPlugin, JobController}) {
				t.Errorf("%s step %d: at %s, jobs %v", name, i, st.At, jobs)
			}
		}
		last := b.steps[len(b.steps)-1]
		for _, family := range scenarios[name].promises {
			if len(series(last, family)) == 0 {
				t.Errorf("%s: its last step has no %s", name, family)
			}
		}
	}
}
