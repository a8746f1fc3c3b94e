// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

// Command etcd is etcd's own server main, built from the published
// go.etcd.io/etcd/server/v3 module at the version pinned in this directory's
// go.mod, for the integration harness (hack/harness). A separate module from
// ../go.mod because k8s.io/kubernetes requires a newer etcd server module as an
// indirect dependency, which minimal version selection would pick instead.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
