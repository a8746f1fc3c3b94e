// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package webhookcert

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"sync"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// FileSource serves tls.crt and tls.key of a directory that another tool
// (cert-manager, through a mounted Secret) renews, and reloads them when
// they change, without a restart. The watching is k8s.io/apiserver's
// dynamiccertificates, which kube-apiserver itself uses to reload its
// serving certificate: file events, plus a re-read every minute for
// volumes whose updates raise none.
type FileSource struct {
	content *dynamiccertificates.DynamicCertKeyPairContent

	mu              sync.Mutex
	certPEM, keyPEM []byte
	pair            *tls.Certificate
}

// NewFileSource loads dir/tls.crt and dir/tls.key; they must exist.
func NewFileSource(dir string) (*FileSource, error) {
	content, err := dynamiccertificates.NewDynamicServingContentFromFiles("webhook", filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("loading the webhook certificate from %s: %w", dir, err)
	}
	return &FileSource{content: content}, nil
}

// Run watches the files until ctx ends.
func (f *FileSource) Run(ctx context.Context) error {
	f.content.Run(ctx, 1)
	return nil
}

// GetCertificate is for tls.Config: the files' current certificate.
func (f *FileSource) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	certPEM, keyPEM := f.content.CurrentCertKeyContent()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pair != nil && bytes.Equal(certPEM, f.certPEM) && bytes.Equal(keyPEM, f.keyPEM) {
		return f.pair, nil
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the webhook certificate files are not a usable key pair: %w", err)
	}
	f.certPEM, f.keyPEM, f.pair = certPEM, keyPEM, &pair
	return &pair, nil
}

// Ready is nil while the files hold a usable key pair.
func (f *FileSource) Ready() error {
	_, err := f.GetCertificate(nil)
	return err
}
