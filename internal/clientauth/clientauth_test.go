// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package clientauth_test

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpufrac/gpufrac/internal/clientauth"
	"github.com/gpufrac/gpufrac/internal/clientauth/clientauthtest"
)

// TestOnlyTheAPIServersCertificateGetsIn: over real TLS handshakes, a
// server set up with a client CA (and names) accepts the certificate the
// API server would present and refuses everything else before any
// request reaches the handler.
func TestOnlyTheAPIServersCertificateGetsIn(t *testing.T) {
	ca, other := clientauthtest.NewCA(t, "apiserver-client-ca"), clientauthtest.NewCA(t, "someone-else")
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	apiserver := ca.Client(t, "kube-apiserver-webhook-client")
	for _, tc := range []struct {
		name  string
		cfg   clientauth.Config
		cert  *tls.Certificate
		admit bool
	}{
		{"not configured: anyone", clientauth.Config{}, nil, true},
		{"no certificate", clientauth.Config{CAFile: caFile}, nil, false},
		{"the API server's", clientauth.Config{CAFile: caFile}, &apiserver, true},
		{"signed by another CA", clientauth.Config{CAFile: caFile}, ptr(other.Client(t, "kube-apiserver-webhook-client")), false},
		{"the API server's, name accepted", clientauth.Config{CAFile: caFile, Names: []string{"kube-apiserver-webhook-client"}}, &apiserver, true},
		{"the CA's, another name", clientauth.Config{CAFile: caFile, Names: []string{"kube-apiserver-webhook-client"}}, ptr(ca.Client(t, "system:node:n1")), false},
		{"accepted by DNS name", clientauth.Config{CAFile: caFile, Names: []string{"apiserver.example"}}, ptr(ca.Client(t, "x", "apiserver.example")), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reached := false
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				reached = true
				_, _ = w.Write([]byte("ok"))
			}))
			srv.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
			if err := tc.cfg.Apply(srv.TLS); err != nil {
				t.Fatal(err)
			}
			srv.Config.ErrorLog = nil
			srv.StartTLS()
			defer srv.Close()
			tr := srv.Client().Transport.(*http.Transport).Clone()
			if tc.cert != nil {
				tr.TLSClientConfig.Certificates = []tls.Certificate{*tc.cert}
			}
			resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Post(srv.URL+"/validate-resources", "application/json", strings.NewReader("{}"))
			if err == nil {
				_ = resp.Body.Close()
			}
			if admitted := err == nil && resp.StatusCode == http.StatusOK; admitted != tc.admit || reached != tc.admit {
				t.Errorf("admitted %v (handler reached %v, error %v), want %v", admitted, reached, err, tc.admit)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestBadConfigurationIsRefused: a configuration that cannot work is an
// error at start, naming the file and what is wrong with it.
func TestBadConfigurationIsRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, raw []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, raw, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		cfg  clientauth.Config
		want string
	}{
		{"names without a CA", clientauth.Config{Names: []string{"a"}}, "no client CA file"},
		{"a missing file", clientauth.Config{CAFile: filepath.Join(dir, "absent")}, "no such file"},
		{"no PEM in it", clientauth.Config{CAFile: write("garbage", []byte("not a certificate"))}, "no PEM certificate"},
		{"a directory", clientauth.Config{CAFile: dir}, "client CA file"},
		{"oversized", clientauth.Config{CAFile: write("big", make([]byte, 2<<20))}, "larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Apply(&tls.Config{MinVersion: tls.VersionTLS12})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one saying %q", err, tc.want)
			}
		})
	}
}
