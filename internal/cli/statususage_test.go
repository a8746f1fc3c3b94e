// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// promStandIn speaks Prometheus's instant-query API as Prometheus 2.x
// does (https://prometheus.io/docs/prometheus/latest/querying/api/):
// GET or form-encoded POST on /api/v1/query, "query" and an optional
// "time"/"timeout", an envelope {"status","data":{"resultType","result"}}
// or {"status":"error","errorType","error"} with 400 for bad data. It is
// stricter than Prometheus: a query other than the one status must send
// is refused as bad data, as are parameters Prometheus does not take.
// answer is the result vector; fail, when set, is the error returned.
func promStandIn(t *testing.T, answer []map[string]any, fail *promError) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		refuse := func(code int, kind, msg string) {
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": kind, "error": msg})
		}
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodPost {
			w.WriteHeader(http.StatusMethodNotAllowed)
			return
		}
		if r.Method == http.MethodPost && r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			refuse(http.StatusBadRequest, "bad_data", "POST without a form")
			return
		}
		if err := r.ParseForm(); err != nil {
			refuse(http.StatusBadRequest, "bad_data", err.Error())
			return
		}
		for k := range r.Form {
			if k != "query" && k != "time" && k != "timeout" {
				refuse(http.StatusBadRequest, "bad_data", "unexpected parameter "+k)
				return
			}
		}
		if q := r.Form.Get("query"); q != usageQuery {
			t.Errorf("query %q, want %q", q, usageQuery)
			refuse(http.StatusBadRequest, "bad_data", fmt.Sprintf("invalid parameter \"query\": unexpected %q", q))
			return
		}
		if fail != nil {
			refuse(fail.code, fail.kind, fail.msg)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success",
			"data": map[string]any{"resultType": "vector", "result": answer}})
	}))
	t.Cleanup(srv.Close)
	return srv
}

type promError struct {
	code      int
	kind, msg string
}

// sample is one element of a vector result: labels, and [time, "value"].
func sample(labels map[string]string, value string) map[string]any {
	return map[string]any{"metric": labels, "value": []any{1767225600.123, value}}
}

func runStatusMap(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCLI(mapCluster(), append([]string{"status"}, args...)...)
}

// With --prometheus-url, the map draws the used memory Prometheus sums
// per (node, gpu_uuid, claim_uid): team/llm uses 50Gi of its 40Gi request
// on gpu-0, so it borrows 10Gi. Series of another node, or without a
// claim, are not drawn.
func TestStatusMapUsage(t *testing.T) {
	srv := promStandIn(t, []map[string]any{
		sample(map[string]string{"node": "node-a", "gpu_uuid": "GPU-0c", "claim_uid": "uid-llm"}, "53687091200"),
		sample(map[string]string{"node": "node-b", "gpu_uuid": "GPU-0c", "claim_uid": "uid-llm"}, "1e9"),
		sample(map[string]string{"node": "node-a", "gpu_uuid": "GPU-0c"}, "2e9"),
	}, nil)
	got, err := runStatusMap(t, "-o", "map", "--prometheus-url", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	// 46 cells of 80Gi: the 40Gi used within the request 23, the 10Gi
	// borrowed 5.75 (6), the 10Gi of burst room left 5.75 (6), the 20Gi
	// free 11.5 (11).
	for _, want := range []string{
		"\n  gpu-0     80Gi |" + strings.Repeat("A", 29) + strings.Repeat("~", 6) + strings.Repeat(".", 11) + "| 40Gi free\n",
		"\n    request   limit    used  claim (GPUs)\n",
		"\n  A    40Gi    60Gi    50Gi  team/llm (gpu-0) borrows 10Gi\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("map lacks %q:\n%s", want, got)
		}
	}
	if flat := strings.Join(strings.Fields(got), " "); !strings.Contains(flat, "as the Prometheus at "+srv.URL+" last scraped it") {
		t.Errorf("the map does not say where the usage came from:\n%s", got)
	}
}

// A failed query is said, with the URL and Prometheus's error, and the
// map is still drawn, without usage.
func TestStatusMapUsageFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		srv  func(*testing.T) string
		want string
	}{{
		name: "an error payload",
		srv: func(t *testing.T) string {
			return promStandIn(t, nil, &promError{code: 422, kind: "execution", msg: "query processing would load too many samples"}).URL
		},
		want: "execution: query processing would load too many samples",
	}, {
		name: "not a Prometheus",
		srv: func(t *testing.T) string {
			srv := httptest.NewServer(http.NotFoundHandler())
			t.Cleanup(srv.Close)
			return srv.URL
		},
		want: "404",
	}, {
		name: "a matrix, not a vector",
		srv: func(t *testing.T) string {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`))
			}))
			t.Cleanup(srv.Close)
			return srv.URL
		},
		want: "the result is a matrix, want a vector",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.srv(t)
			got, err := runStatusMap(t, "-o", "map", "--prometheus-url", url)
			if err != nil {
				t.Fatalf("a failed query must not fail the map: %v", err)
			}
			flat := strings.Join(strings.Fields(got), " ")
			if !strings.Contains(flat, "Used memory is not drawn: querying the Prometheus at "+url+" failed:") ||
				!strings.Contains(flat, tc.want) {
				t.Errorf("the map does not say the query failed with %q:\n%s", tc.want, got)
			}
			if !strings.Contains(got, "\n  A    40Gi    60Gi  team/llm (gpu-0)\n") {
				t.Errorf("the map is not drawn without usage:\n%s", got)
			}
		})
	}
}

// --prometheus-url only draws into the map; elsewhere it is refused, not
// ignored.
func TestStatusPrometheusURLNeedsMap(t *testing.T) {
	for _, args := range [][]string{{"--prometheus-url", "http://p:9090"}, {"-o", "json", "--prometheus-url", "http://p:9090"}} {
		if _, err := runStatusMap(t, args...); err == nil || !strings.Contains(err.Error(), "-o map") {
			t.Errorf("%v: %v, want a refusal naming -o map", args, err)
		}
	}
}
