// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package metricsserver_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpufrac/gpufrac/internal/metricsserver"
)

// testLimits are DefaultLimits with timeouts short enough for a test; the
// sizes are the defaults.
func testLimits() metricsserver.Limits {
	l := metricsserver.DefaultLimits()
	l.ReadHeader, l.Read, l.Write, l.Idle = 300*time.Millisecond, 300*time.Millisecond, 2*time.Second, 300*time.Millisecond
	return l
}

func start(t *testing.T, checks metricsserver.Checks) string {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "gpufrac_test_total", Help: "A counter."}))
	addr, stopped, err := metricsserver.StartWithLimits(ctx, "127.0.0.1:0", reg, checks, testLimits())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-stopped })
	return addr
}

// answer is what came back for a request: status 0 with the read error
// when the server closed the connection without one.
type answer struct {
	status int
	header http.Header
	length int64
}

// raw sends req as bytes on a new connection and reads the answer.
func raw(t *testing.T, addr string, req []byte) (answer, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	go func() { _, _ = conn.Write(req) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, length: resp.ContentLength}, nil
}

// TestHostileRequests: each row a request a stranger on the pod network
// can send to the metrics port (it serves no authentication: docs/security.md).
// Nothing but GET or HEAD of /metrics, /healthz and /readyz is served,
// nothing is read beyond the bounds, and the server keeps answering.
func TestHostileRequests(t *testing.T) {
	addr := start(t, metricsserver.Checks{Readyz: func() error { return errors.New(strings.Repeat("e", 1<<20)) }})
	bigHeader := "X-Big: " + strings.Repeat("h", 64<<10) + "\r\n"
	for _, tc := range []struct {
		name string
		req  string
		// status is the answer's; 0 means the server closes the
		// connection without one.
		status int
		check  func(t *testing.T, a answer)
	}{
		{name: "GET /metrics", req: "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", status: 200},
		{name: "HEAD /metrics", req: "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n", status: 200},
		{name: "POST /metrics", req: "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", status: 405,
			check: func(t *testing.T, a answer) {
				if allow := a.header.Get("Allow"); allow != "GET, HEAD" {
					t.Errorf("Allow %q", allow)
				}
			}},
		{name: "DELETE /healthz", req: "DELETE /healthz HTTP/1.1\r\nHost: x\r\n\r\n", status: 405},
		{name: "PUT /readyz with a 10 MiB body", req: "PUT /readyz HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n" + strings.Repeat("b", 10<<20), status: 405},
		{name: "TRACE /metrics", req: "TRACE /metrics HTTP/1.1\r\nHost: x\r\n\r\n", status: 405},
		{name: "CONNECT", req: "CONNECT 10.0.0.1:443 HTTP/1.1\r\nHost: 10.0.0.1:443\r\n\r\n", status: 404},
		{name: "a path climbing out is sent to its clean form, which is not served", req: "GET /../../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", status: 307,
			check: func(t *testing.T, a answer) {
				if loc := a.header.Get("Location"); loc != "/etc/passwd" {
					t.Errorf("Location %q", loc)
				}
			}},
		{name: "the clean form", req: "GET /etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", status: 404},
		{name: "an encoded path climbing out", req: "GET /%2e%2e/%2e%2e/etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", status: 404},
		{name: "a path under /metrics", req: "GET /metrics/x HTTP/1.1\r\nHost: x\r\n\r\n", status: 404},
		{name: "a NUL in the path", req: "GET /healthz%00 HTTP/1.1\r\nHost: x\r\n\r\n", status: 404},
		{name: "the root", req: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", status: 404},
		{name: "debug endpoints are not served", req: "GET /debug/pprof/ HTTP/1.1\r\nHost: x\r\n\r\n", status: 404},
		{name: "a 64 KiB header", req: "GET /metrics HTTP/1.1\r\nHost: x\r\n" + bigHeader + "\r\n", status: 431},
		{name: "a 64 KiB request line", req: "GET /metrics?" + strings.Repeat("q", 64<<10) + " HTTP/1.1\r\nHost: x\r\n\r\n", status: 431},
		{name: "a TLS handshake", req: "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + strings.Repeat("\x00", 64), status: 400},
		{name: "garbage", req: "\x00\x01\x02 nonsense\r\n\r\n", status: 400},
		{name: "a GET with a 10 MiB body", req: "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\n" + strings.Repeat("b", 10<<20), status: 200},
		{name: "a failing probe's 1 MiB message is cut", req: "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n", status: 503,
			check: func(t *testing.T, a answer) {
				if a.length > 1100 {
					t.Errorf("probe message of %d bytes", a.length)
				}
			}},
		{name: "headers that never end (slow client)", req: "GET /metrics HTTP/1.1\r\nHost: x\r\n", status: 0},
		{name: "a body that never comes", req: "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n", status: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := raw(t, addr, []byte(tc.req))
			switch {
			case tc.status == 0 && err == nil:
				t.Errorf("answered %d; want the connection closed", got.status)
			case tc.status == 0 && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("connection ended with %v; want the server to close it", err)
			case tc.status != 0 && err != nil:
				t.Errorf("no answer: %v", err)
			case tc.status != 0 && got.status != tc.status:
				t.Errorf("status %d, want %d", got.status, tc.status)
			case tc.check != nil:
				tc.check(t, got)
			}
			// Whatever came before, the server still serves a scrape.
			scrape, err := raw(t, addr, []byte("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))
			if err != nil || scrape.status != http.StatusOK {
				t.Fatalf("scrape after the hostile request: %d %v", scrape.status, err)
			}
		})
	}
}

// TestProbeFloodRunsTheCheckOnce: 200 concurrent /healthz requests (the
// plugin's check dials its sockets and reads the checkpoint) run the
// check once per ProbeInterval, not once each, and all get its answer.
func TestProbeFloodRunsTheCheckOnce(t *testing.T) {
	var runs atomic.Int32
	release := make(chan struct{})
	addr := start(t, metricsserver.Checks{Healthz: func() error {
		runs.Add(1)
		<-release
		return errors.New("wedged")
	}})
	var wg sync.WaitGroup
	statuses := make([]int, 200)
	for i := range statuses {
		wg.Go(func() {
			a, err := raw(t, addr, []byte("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"))
			if err == nil {
				statuses[i] = a.status
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	close(release)
	wg.Wait()
	for i, s := range statuses {
		if s != http.StatusServiceUnavailable {
			t.Fatalf("request %d: status %d, want 503", i, s)
		}
	}
	// testLimits keep the default interval (1 s): one run, or two if the
	// requests straddled it on a slow machine.
	if n := runs.Load(); n > 2 {
		t.Errorf("the check ran %d times for 200 requests", n)
	}
}
