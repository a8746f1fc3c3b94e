// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/hack/prombin"
	"github.com/gpufrac/gpufrac/internal/mustrun"
)

// Against a real Prometheus (Debian's 2.42, hack/prombin) scraping a
// plugin's exposition: team/llm's two containers on gpu-0 use 30Gi and
// 20Gi, which the query sums to the 50Gi the map draws; a container of
// another node's claim is not drawn here.
func TestStatusMapUsageRealPrometheus(t *testing.T) {
	bins, err := prombin.Fetch(t.Context())
	mustrun.Need(t, err == nil, fmt.Sprintf("Debian's prometheus 2.42 (%v)", err))
	plugin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		const labels = `node="node-a",namespace="team",pod="llm-0",claim_uid="uid-llm",gpu_uuid="GPU-0c"`
		fmt.Fprintln(w, "# HELP gpufrac_container_gpu_memory_used_bytes GPU memory the container uses now.")
		fmt.Fprintln(w, "# TYPE gpufrac_container_gpu_memory_used_bytes gauge")
		fmt.Fprintf(w, "gpufrac_container_gpu_memory_used_bytes{%s,container=\"main\"} 3.221225472e+10\n", labels)
		fmt.Fprintf(w, "gpufrac_container_gpu_memory_used_bytes{%s,container=\"side\"} 2.147483648e+10\n", labels)
		fmt.Fprintln(w, `gpufrac_container_gpu_memory_used_bytes{node="node-b",namespace="team",pod="x",container="c",claim_uid="uid-llm",gpu_uuid="GPU-0c"} 1e9`)
	}))
	defer plugin.Close()
	srv, err := bins.StartServer(t.Context(), t, prombin.ServerOptions{
		Targets: []prombin.Target{{Job: "gpufrac-kubelet-plugin", URL: plugin.URL + "/metrics"}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitScraped(t.Context(), 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := runStatusMap(t, "-o", "map", "--prometheus-url", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"\n  gpu-0     80Gi |" + strings.Repeat("A", 29) + strings.Repeat("~", 6) + strings.Repeat(".", 11) + "| 40Gi free\n",
		"\n  A    40Gi    60Gi    50Gi  team/llm (gpu-0) borrows 10Gi\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("map lacks %q:\n%s", want, got)
		}
	}
}
