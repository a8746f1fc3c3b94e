// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// TestUseProtobufSpeaksProtobuf: a client of a config UseProtobuf changed
// asks for protobuf, sends protobuf, and reads a protobuf answer.
func TestUseProtobufSpeaksProtobuf(t *testing.T) {
	var mu sync.Mutex
	var accepts, contentTypes []string
	pb := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		accepts = append(accepts, r.Header.Get("Accept"))
		contentTypes = append(contentTypes, r.Header.Get("Content-Type"))
		mu.Unlock()
		node := &v1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
		w.Header().Set("Content-Type", runtime.ContentTypeProtobuf)
		if err := pb.Encode(node, w); err != nil {
			t.Error(err)
		}
	}))
	defer srv.Close()
	config := &rest.Config{Host: srv.URL}
	UseProtobuf(config)
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.CoreV1().Nodes().Create(context.Background(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a node against a protobuf server: %v", err)
	}
	if got.Name != "n1" {
		t.Errorf("decoded node %q, want n1", got.Name)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(accepts) != 1 || !strings.HasPrefix(accepts[0], runtime.ContentTypeProtobuf) {
		t.Errorf("Accept headers %q, want protobuf first", accepts)
	}
	if len(contentTypes) != 1 || contentTypes[0] != runtime.ContentTypeProtobuf {
		t.Errorf("Content-Type headers %q, want %s", contentTypes, runtime.ContentTypeProtobuf)
	}
}
