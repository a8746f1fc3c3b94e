// Copyright The gpufrac Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"strconv"
)

// What a chart's workloads need of the harness (Options.Workloads): the
// controllers that run DaemonSets and Deployments and publish Services'
// endpoints and the cluster CA, a pod network that the API server (on the
// host) routes to, and an API server address that pods reach.
//
// The pod network is the CNI ptp plugin: each pod gets a veth pair, its end
// in the pod's network namespace with an address of PodNetwork.Subnet, the
// host's end with PodNetwork.Gateway and a /32 route to the pod. The API
// server dials a webhook Service's endpoint (the pod's address) over that
// route (--enable-aggregator-routing: there is no kube-proxy to make a
// ClusterIP work), and pods reach the API server at the gateway (it listens
// on every address, its certificate names the gateway). The veth pairs go
// with the pods' network namespaces; nothing else on the host changes
// (ipMasq is off, and the node's ip_forward is a file of the test, see
// podNetworkSysctls: traffic between the host and its own pods is local
// delivery, never forwarded).

// workloadControllers are kube-controller-manager's controllers beyond the
// claims' ones that a chart's objects need.
var workloadControllers = []string{
	"daemonset-controller", "deployment-controller", "replicaset-controller",
	"endpointslice-controller", "root-ca-certificate-publisher-controller",
}

// podNetworkSysctls are the settings the ptp plugin writes on the host
// (ip.EnableForward); in the node's namespace they are files of the test.
var podNetworkSysctls = []string{"net/ipv4/ip_forward"}

// PodNetwork is the address range of the real nodes' pods.
type PodNetwork struct {
	// Subnet is a /24 of 10.0.0.0/8, chosen at random per control plane so
	// that harnesses running side by side on one machine do not route each
	// other's pods.
	Subnet string
	// Gateway is the host's address on every pod's veth pair, where pods
	// reach the API server.
	Gateway string
}

func newPodNetwork() (*PodNetwork, error) {
	n, err := rand.Int(rand.Reader, big.NewInt(100*256))
	if err != nil {
		return nil, err
	}
	// 10.100.0.0 to 10.199.255.0: clear of the service range (10.0.0.0/24)
	// and of the tap network of the e2e node (10.244.0.0/24).
	a, b := 100+n.Int64()/256, n.Int64()%256
	return &PodNetwork{Subnet: fmt.Sprintf("10.%d.%d.0/24", a, b), Gateway: fmt.Sprintf("10.%d.%d.1", a, b)}, nil
}

// APIServerForPods is the host and port at which pods of the real nodes
// reach the API server (the chart's kubernetesAPI values): the control
// plane runs no kube-proxy, so the kubernetes Service's ClusterIP leads
// nowhere.
func (cp *ControlPlane) APIServerForPods() (host string, port int, err error) {
	if cp.PodNetwork == nil {
		return "", 0, fmt.Errorf("the control plane was started without Options.Workloads")
	}
	_, portStr, err := net.SplitHostPort(cp.server[len("https://"):])
	if err != nil {
		return "", 0, err
	}
	port, err = strconv.Atoi(portStr)
	return cp.PodNetwork.Gateway, port, err
}

// ptpCNIConfig is the pod network of Options.Workloads.
func ptpCNIConfig(pn *PodNetwork, dataDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "gpufrac-e2e",
  "plugins": [{
    "type": "ptp",
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q, "gateway": %q}]], "routes": [{"dst": "0.0.0.0/0"}], "dataDir": %q}
  }]
}
`, pn.Subnet, pn.Gateway, dataDir)
}
