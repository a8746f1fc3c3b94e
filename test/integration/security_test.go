// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// TestPluginNeverLogsItsToken runs the plugin binary at the highest
// verbosity (-v=10, where client-go logs every request with its headers)
// with a bearer token the API server refuses, so every request fails and
// is logged, and checks that the token appears nowhere in its output.
func TestPluginNeverLogsItsToken(t *testing.T) {
	t.Parallel()
	token := "gpufrac-secret-" + rand.String(24)
	dir, err := os.MkdirTemp("", "gf") // socket paths must stay short
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: cp.RestConfig.Host, CertificateAuthority: cp.RestConfig.CAFile}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "c"
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, kubeconfig); err != nil {
		t.Fatal(err)
	}

	logPath := filepath.Join(dir, "plugin.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(cp.PluginBinary, "--node-name=n-token", "--simulate-gpus=h200x1", "--kubeconfig="+kubeconfig,
		"--plugin-data-dir="+filepath.Join(dir, "p"), "--registrar-dir="+filepath.Join(dir, "r"), "--cdi-root="+filepath.Join(dir, "cdi"),
		"--metrics-address=", "-v=10")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()

	// Wait until a refused request was logged with its headers (or the
	// plugin gave up): only then has the token had its chance to leak.
	const masked = "Bearer <masked>"
	logged := func(log []byte) bool {
		return bytes.Contains(log, []byte(masked)) && bytes.Contains(log, []byte("401"))
	}
	var log []byte
	_ = wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, waitTimeout, true, func(context.Context) (bool, error) {
		log, _ = os.ReadFile(logPath)
		select {
		case <-exited:
			return true, nil
		default:
			return logged(log), nil
		}
	})
	_ = cmd.Process.Kill() // by its PID; a no-op when it exited
	<-exited
	if log, err = os.ReadFile(logPath); err != nil {
		t.Fatal(err)
	}
	if !logged(log) {
		t.Fatalf("the plugin never logged a refused request with its headers (%q and 401); the check would prove nothing:\n%s", masked, tail(log, 30))
	}
	if bytes.Contains(log, []byte(token)) {
		t.Errorf("the plugin logged its bearer token:\n%s", tail(log, 30))
	}
}

func tail(b []byte, n int) []byte {
	lines := bytes.Split(b, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return bytes.Join(lines, []byte("\n"))
}
