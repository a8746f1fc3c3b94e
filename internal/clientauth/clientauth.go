// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Package clientauth makes the admission webhook server accept only the
// client certificate kube-apiserver presents, where the cluster has the
// API server present one. Kubernetes documents it ("Authenticate API
// servers", kubernetes.io/docs/reference/access-authn-authz/
// extensible-admission-controllers/#authenticate-apiservers): the API server's
// AdmissionConfiguration names, per webhook plugin, a WebhookAdmission
// kubeConfigFile whose user entry for the webhook's host
// ("<service>.<namespace>.svc") holds a client certificate, which the API
// server then uses for every call to that webhook. The webhook is to
// verify it. Without it anything that reaches the webhook's port can call
// it; the handlers have no side effects (docs/security.md), but they read
// the cluster's GPU inventory on behalf of whoever asks.
package clientauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// maxCAFileBytes bounds the CA bundle read: a bundle of a hundred
// certificates is under 200 KiB.
const maxCAFileBytes = 1 << 20

// Config says which client certificates the webhook server accepts.
type Config struct {
	// CAFile is a PEM bundle of the CAs that sign the API server's client
	// certificate. Empty: no client certificate is asked for (the
	// default; most clusters configure none).
	CAFile string
	// Names, when not empty, are the subjects accepted: a certificate
	// signed by the CAs must also carry one of them as its common name or
	// as a DNS name. Empty: any certificate the CAs signed.
	Names []string
}

// Apply sets up tlsConfig to require and verify client certificates as c
// says; with no CAFile it changes nothing.
func (c Config) Apply(tlsConfig *tls.Config) error {
	if c.CAFile == "" {
		if len(c.Names) > 0 {
			return errors.New("client certificate names are set but no client CA file: set --client-ca-file too")
		}
		return nil
	}
	pool, err := loadPool(c.CAFile)
	if err != nil {
		return err
	}
	tlsConfig.ClientAuth = tls.RequireAndVerifyClientCert
	tlsConfig.ClientCAs = pool
	if len(c.Names) > 0 {
		names := slices.Clone(c.Names)
		tlsConfig.VerifyConnection = func(cs tls.ConnectionState) error {
			return checkName(cs.PeerCertificates, names)
		}
	}
	return nil
}

func loadPool(path string) (*x509.CertPool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("client CA file: %w", err)
	}
	defer func() { _ = f.Close() }()
	raw, err := io.ReadAll(io.LimitReader(f, maxCAFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("client CA file %s: %w", path, err)
	}
	if len(raw) > maxCAFileBytes {
		return nil, fmt.Errorf("client CA file %s: larger than %d bytes", path, maxCAFileBytes)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("client CA file %s: no PEM certificate in it", path)
	}
	return pool, nil
}

// checkName accepts a verified chain whose leaf carries one of names.
func checkName(chain []*x509.Certificate, names []string) error {
	if len(chain) == 0 {
		return errors.New("no client certificate")
	}
	leaf := chain[0]
	if slices.Contains(names, leaf.Subject.CommonName) {
		return nil
	}
	for _, dns := range leaf.DNSNames {
		if slices.Contains(names, dns) {
			return nil
		}
	}
	return fmt.Errorf("client certificate of %q (DNS names %s) is not one of the accepted names %s",
		leaf.Subject.CommonName, strings.Join(leaf.DNSNames, ", "), strings.Join(names, ", "))
}
