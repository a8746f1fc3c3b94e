// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package prombin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"sigs.k8s.io/yaml"

	"github.com/gpufrac/gpufrac/hack/debfetch"
)

// Target is one HTTP endpoint a server scrapes.
type Target struct {
	Job string
	// URL is the metrics endpoint: http://host:port/path.
	URL string
	// Labels are added to every series of the target.
	Labels map[string]string
}

// ServerOptions configure a server.
type ServerOptions struct {
	Targets []Target
	// ScrapeInterval is every job's; 0 means one second. The scrape
	// timeout is the interval.
	ScrapeInterval time.Duration
	// EvaluationInterval is the rules'; 0 means the scrape interval.
	EvaluationInterval time.Duration
	// RuleFiles are loaded as Prometheus loads rule_files.
	RuleFiles []string
}

// Server is a running Prometheus.
type Server struct {
	// URL is its HTTP API's base, http://127.0.0.1:port.
	URL string
	// Dir holds its configuration, data and log (prometheus.log).
	Dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartServer starts Prometheus on a free port of 127.0.0.1 with a
// configuration scraping opts.Targets, waits until it is ready, and stops
// it when t ends (printing its log's end if t failed).
func (b Binaries) StartServer(ctx context.Context, t testing.TB, opts ServerOptions) (*Server, error) {
	t.Helper()
	s, err := b.Start(ctx, t.TempDir(), opts)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("prometheus log (end):\n%s", s.LogTail())
		}
		s.Stop()
	})
	return s, nil
}

// Start is StartServer outside a test (make demo's dashboard table): the
// server keeps its configuration, data and log in dir, and the caller
// stops it.
func (b Binaries) Start(ctx context.Context, dir string, opts ServerOptions) (*Server, error) {
	cfg, err := config(opts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), cfg, 0o644); err != nil {
		return nil, err
	}
	// A port picked free can be taken before Prometheus binds it: try a
	// few.
	var lastErr error
	for range 3 {
		s, err := b.start(ctx, dir)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func config(opts ServerOptions) ([]byte, error) {
	interval := opts.ScrapeInterval
	if interval <= 0 {
		interval = time.Second
	}
	eval := opts.EvaluationInterval
	if eval <= 0 {
		eval = interval
	}
	jobs := map[string][]any{}
	var order []string
	for _, tg := range opts.Targets {
		u, err := url.Parse(tg.URL)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("target %s of job %s: want an http(s)://host:port/path URL", tg.URL, tg.Job)
		}
		labels := map[string]string{"__scheme__": u.Scheme, "__metrics_path__": u.Path}
		if u.Path == "" {
			labels["__metrics_path__"] = "/metrics"
		}
		for k, v := range tg.Labels {
			labels[k] = v
		}
		if _, ok := jobs[tg.Job]; !ok {
			order = append(order, tg.Job)
		}
		jobs[tg.Job] = append(jobs[tg.Job], map[string]any{"targets": []string{u.Host}, "labels": labels})
	}
	var scrape []any
	for _, j := range order {
		scrape = append(scrape, map[string]any{"job_name": j, "static_configs": jobs[j]})
	}
	return yaml.Marshal(map[string]any{
		"global": map[string]any{
			"scrape_interval":     model.Duration(interval).String(),
			"scrape_timeout":      model.Duration(interval).String(),
			"evaluation_interval": model.Duration(eval).String(),
		},
		"rule_files":     opts.RuleFiles,
		"scrape_configs": scrape,
	})
}

func (b Binaries) start(ctx context.Context, dir string) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	logPath := filepath.Join(dir, "prometheus.log")
	log, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = log.Close() }()
	_ = os.RemoveAll(filepath.Join(dir, "data"))
	cmd := exec.Command(b.Prometheus,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--web.local-assets="+filepath.Join(b.root, "usr", "share", "prometheus", "web"),
		"--web.console.templates="+filepath.Join(b.root, "etc", "prometheus", "consoles"),
		"--web.console.libraries="+filepath.Join(b.root, "etc", "prometheus", "console_libraries"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", b.Prometheus, err)
	}
	s := &Server{URL: "http://" + addr, Dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("prometheus on %s: %w; its log ends:\n%s", addr, err, s.LogTail())
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.exited:
			return errors.New("it exited before it was ready")
		default:
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/-/ready", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop ends the server (SIGTERM, then SIGKILL after ten seconds) and waits
// for it.
func (s *Server) Stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Exited tells whether the server's process has ended.
func (s *Server) Exited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// LogTail is the end of the server's log.
func (s *Server) LogTail() string {
	data, _ := os.ReadFile(filepath.Join(s.Dir, "prometheus.log"))
	return debfetch.Tail(data)
}

// get calls an API endpoint and decodes its data field into out.
func (s *Server) get(ctx context.Context, path string, params url.Values, out any) error {
	u := s.URL + path
	if len(params) > 0 {
		u += "?" + params.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	var env struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return fmt.Errorf("GET %s: HTTP %d, not the API's JSON: %w: %s", u, resp.StatusCode, err, bytes.TrimSpace(body))
	}
	if env.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", u, env.ErrorType, env.Error)
	}
	return json.Unmarshal(env.Data, out)
}
