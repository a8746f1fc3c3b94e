#!/usr/bin/env bash
# make demo: what gpufrac does, on a laptop without a GPU.
#
# 1. Checks the demo manifests with kubectl-gpufrac validate, the code the
#    driver runs, and shows a broken claim being refused.
# 2. Runs demo/cmd/demo: a real local control plane (etcd, kube-apiserver,
#    kube-scheduler, kube-controller-manager v1.37.2, built from the Go module
#    proxy on the first run and cached in ~/.cache/gpufrac), two simulated
#    nodes of 8 x H200 with gpufrac-kubelet-plugin each, and either a real
#    kubelet, containerd and runc (root on Linux with writable cgroups; the
#    containers print what they see) or a kubelet stand-in (otherwise; the
#    demo says which and why), the manifests in demo/ and the DeviceClasses
#    of deployments/deviceclasses.yaml applied with kubectl,
#    pods Running on GPU shares, a monitoring pod with an adminAccess claim
#    (demo/monitor.yaml), `kubectl gpufrac status` and its memory map
#    (`-o map`), the plugin's
#    metrics for one pod and `kubectl describe resourceclaim`, and a pod too
#    large for any GPU (demo/too-large.yaml) explained by `kubectl gpufrac why`,
#    and (on the real node) pod llm borrowing above its request: the Warning
#    Events on its claim and pod and the plugin's incident counter; then a
#    borrowing pod evicted by the GPU's MPS daemon (the double) when another
#    pod needs its request: the MPSClientEvicted Events and the counter;
#    then a node with MIG instances beside a fractional GPU, a pod on a
#    whole MIG instance (class mig.gpufrac.dev) and that node's status.
#    A real Prometheus (Debian's 2.42) scrapes the plugins and
#    gpufrac-controller (its fragmentation metrics) throughout; at
#    the end the Grafana dashboard's panels evaluated on those metrics go to
#    demo/state/dashboard-panels.txt (panel, query, series returned).
#
# Arguments go to the demo driver, e.g. demo/run.sh -wait (keep the cluster
# until Ctrl-C), -gpus h100x4,a100x4 or -node=standin.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

step "Checking the demo manifests with kubectl-gpufrac validate"
bin/kubectl-gpufrac validate -f deployments/deviceclasses.yaml -f demo/claim-template-40g.yaml -f demo/claim-templates.yaml -f demo/monitor.yaml

step "Checking a broken claim (memoryLimit below the request): it must be refused"
if bin/kubectl-gpufrac validate -f demo/invalid/limit-below-request.yaml; then
	echo "demo: the invalid claim was accepted" >&2
	exit 1
fi

step "Previewing a HAMi pod: what HAMi would give it, what gpufrac's claim asks"
bin/kubectl-gpufrac translate -f demo/hami-pods.yaml --gpu-memory 144384Mi

step "Building the demo driver (demo/cmd/demo)"
go build -o bin/gpufrac-demo ./demo/cmd/demo
exec bin/gpufrac-demo "$@"
