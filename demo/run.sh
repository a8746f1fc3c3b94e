#!/usr/bin/env bash
# make demo: what gpufrac does, on a laptop without a GPU.
#
# Until the local control plane lands (see the README), the demo shows the
# two halves that exist: the manifests a user writes, checked by the same
# code the driver runs, and the ResourceSlices a simulated 8 x H200 node
# publishes. It says so rather than pretending to run pods.
set -euo pipefail
cd "$(dirname "$0")/.."
state=demo/state
mkdir -p "$state"
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Checking the demo manifests with kubectl-gpufrac validate"
bin/kubectl-gpufrac validate -f demo/deviceclasses.yaml -f demo/claim-template-40g.yaml

step "Checking a broken claim (memoryLimit below the request): it must be refused"
if bin/kubectl-gpufrac validate -f demo/invalid/limit-below-request.yaml; then
	echo "demo: the invalid claim was accepted" >&2
	exit 1
fi

step "ResourceSlices a simulated node of 8 x H200 (dmem enforcement) publishes"
bin/gpufrac-kubelet-plugin --node-name demo-node --simulate-gpus h200x8 --print-slices \
	>"$state/resourceslices.yaml" 2>"$state/plugin.log"
# In the YAML a device's name comes after its attributes and capacity.
awk '/uuid:/{getline; uuid=$2} /^        value:/{mem=$2}
     /^    name: gpu-/{printf "  %-6s %-42s memory %s\n", $2, uuid, mem}' "$state/resourceslices.yaml"
echo "  full YAML: $state/resourceslices.yaml"

step "Not yet in this demo"
echo "  A local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager v1.37.2),"
echo "  pods scheduled onto these GPUs and claims prepared into CDI specs arrive with the harness and"
echo "  claim-preparation work; see README.md."
