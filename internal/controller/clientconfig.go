// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// UseProtobuf makes a client of config talk protobuf to the API server,
// as kube-scheduler and kube-controller-manager do. The controller watches
// every ResourceClaim, node and ResourceSlice: in JSON, the API server
// encodes each event once more for it alone (the others' protobuf encoding
// is cached and shared), and the controller decodes JSON, several times
// slower. Every type the controller reads or writes is built in
// (kubernetes.Interface), so every request can be protobuf; JSON stays
// accepted for what the server does not serve in protobuf.
func UseProtobuf(config *rest.Config) {
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
}
