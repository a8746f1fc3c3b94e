// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package webhookcert

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/util/cert"
)

// verdict is what a Secret is worth.
type verdict struct {
	// renew says why the Secret must be replaced; empty when it is good.
	renew string
	// oldBundle is the Secret's CA bundle when the Secret is ours and its
	// bundle parses, so a renewal keeps trusting the certificate still
	// served.
	oldBundle []byte

	pair       *tls.Certificate
	leaf       *x509.Certificate
	bundle     []byte
	serveAfter time.Time
}

// hosts are the names the certificate must cover.
func (c Config) hosts() []string {
	svc := c.ServiceName + "." + c.Namespace + ".svc"
	return append([]string{c.ServiceName, c.ServiceName + "." + c.Namespace, svc, svc + ".cluster.local"}, c.ExtraHosts...)
}

// judge decides whether s can be served as it is at now.
func judge(s *corev1.Secret, cfg Config, now time.Time) verdict {
	if s == nil {
		return verdict{renew: "the Secret does not exist"}
	}
	if s.Annotations[AnnotationManagedBy] != managedByValue {
		return verdict{renew: fmt.Sprintf("the Secret was not made by gpufrac-controller (no annotation %s=%s); replacing it", AnnotationManagedBy, managedByValue)}
	}
	v := verdict{}
	if b, err := mergeBundles(now, s.Data[CAKey]); err == nil {
		v.oldBundle = b
	}
	pair, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		v.renew = fmt.Sprintf("the Secret's %s and %s are not a usable key pair: %v", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
		return v
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		v.renew = fmt.Sprintf("the Secret's certificate does not parse: %v", err)
		return v
	}
	roots := x509.NewCertPool()
	if len(s.Data[CAKey]) == 0 || !roots.AppendCertsFromPEM(s.Data[CAKey]) {
		v.renew = fmt.Sprintf("the Secret's %s holds no CA certificate", CAKey)
		return v
	}
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		if c, err := x509.ParseCertificate(der); err == nil {
			inter.AddCert(c)
		}
	}
	for _, h := range cfg.hosts() {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: h, CurrentTime: now}); err != nil {
			v.renew = fmt.Sprintf("the Secret's certificate is not valid for %s under its own CA bundle: %v", h, err)
			return v
		}
	}
	if renewAt := leaf.NotAfter.Add(-cfg.RenewBefore); !now.Before(renewAt) {
		v.renew = fmt.Sprintf("the certificate expires at %s, within the renewal window of %s", leaf.NotAfter.UTC().Format(time.RFC3339), cfg.RenewBefore)
		return v
	}
	v.pair, v.leaf, v.bundle = &pair, leaf, v.oldBundle
	if t, err := time.Parse(time.RFC3339Nano, s.Annotations[AnnotationServeAfter]); err == nil {
		v.serveAfter = t
	}
	return v
}

// generate makes a CA and a serving certificate signed by it, valid from
// an hour ago (clock skew) until Lifetime from now. It returns the chain
// (serving certificate, then CA), the key, and the CA alone.
func generate(cfg Config) (chainPEM, keyPEM, caPEM []byte, err error) {
	hosts := cfg.hosts()
	var ips []net.IP
	var dns []string
	for _, h := range hosts[1:] {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	chainPEM, keyPEM, err = cert.GenerateSelfSignedCertKeyWithOptions(cert.SelfSignedCertKeyOptions{
		Host: hosts[0], AlternateIPs: ips, AlternateDNS: dns,
		// The library back-dates by an hour.
		MaxAge: cfg.Lifetime + time.Hour,
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("generating the webhook certificate: %w", err)
	}
	certs, err := cert.ParseCertsPEM(chainPEM)
	if err != nil || len(certs) != 2 {
		return nil, nil, nil, fmt.Errorf("the generated certificate chain has %d certificates, want 2: %v", len(certs), err)
	}
	caPEM = pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: certs[1].Raw})
	return chainPEM, keyPEM, caPEM, nil
}

// mergeBundles is the union of PEM bundles, without duplicates or
// certificates expired at now, in the order first seen.
func mergeBundles(now time.Time, bundles ...[]byte) ([]byte, error) {
	var out bytes.Buffer
	seen := map[string]bool{}
	for _, b := range bundles {
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		certs, err := cert.ParseCertsPEM(b)
		if err != nil {
			return nil, fmt.Errorf("parsing a CA bundle: %w", err)
		}
		for _, c := range certs {
			if seen[string(c.Raw)] || now.After(c.NotAfter) {
				continue
			}
			seen[string(c.Raw)] = true
			_ = pem.Encode(&out, &pem.Block{Type: cert.CertificateBlockType, Bytes: c.Raw})
		}
	}
	return out.Bytes(), nil
}

// sameCerts tells whether two bundles hold the same certificates.
func sameCerts(a, b []byte) bool {
	ca, errA := cert.ParseCertsPEM(a)
	cb, errB := cert.ParseCertsPEM(b)
	if errA != nil || errB != nil || len(ca) != len(cb) {
		return false
	}
	set := map[string]bool{}
	for _, c := range ca {
		set[string(c.Raw)] = true
	}
	for _, c := range cb {
		if !set[string(c.Raw)] {
			return false
		}
	}
	return true
}
