#!/usr/bin/env bash
# GPU check for gpufrac, for a machine with a real NVIDIA GPU (not CI).
# Run as root from the repository root:  bash test/gpu/run.sh
#
# 1. MPS: starts the control daemon with the exact command lines of the
#    rendered templates/mps-control-daemon.yaml (no Kubernetes), lets its
#    script apply a pinned memory ceiling, and runs memalloc as an MPS client:
#    allocation must stop at the ceiling, not at the GPU's size.
# 2. dmem (driver r615+, cgroup v2): puts a shell in a fresh cgroup, runs
#    gpufrac-cdi-hook on it as a createContainer hook would, and runs memalloc
#    there: allocation must stop at the hard limit.
# Prints PASS/FAIL per check and exits non-zero on any FAIL.
set -uo pipefail
cd "$(dirname "$0")/../.."
work=$(mktemp -d /tmp/gpufrac-gpu.XXXXXX)
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
trap 'echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/pipe nvidia-cuda-mps-control >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null; wait; rm -rf "$work"' EXIT

command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: not a GPU machine"; exit 2; }
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n1)
gcc -O2 -o "$work/memalloc" test/gpu/memalloc.c -ldl || { echo "cannot build memalloc"; exit 2; }

ceiling_mib=4096
limit_slack=512 # the context and allocator granularity

mps_check() {
	command -v nvidia-cuda-mps-control >/dev/null || { fail "MPS: nvidia-cuda-mps-control not found"; return; }
	mkdir -p "$work/pipe" "$work/log" "$work/config"
	echo "$ceiling_mib" >"$work/config/pinned-mem-limit-mib"
	# The daemon container's script, taken from the template as rendered.
	script=$(awk '/^    - \|$/{on=1; next} on && /^    env:/{exit} on{sub(/^      /, ""); print}' templates/mps-control-daemon.yaml |
		sed "s/{{.GPUUUID}}/$uuid/g; s/{{.PinnedMemLimitMiB}}/$ceiling_mib/g")
	nvidia-smi -i "$uuid" -c EXCLUSIVE_PROCESS || { fail "MPS: cannot set EXCLUSIVE_PROCESS"; return; }
	CUDA_VISIBLE_DEVICES=$uuid CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log \
		GPUFRAC_MPS_CONFIG=$work/config sh -c "$script" &
	daemon=$!
	for _ in $(seq 1 100); do [ -f "$work/config/ready" ] && break; sleep 0.2; done
	[ -f "$work/config/ready" ] || { fail "MPS: daemon never became ready; log: $(tail -n5 "$work/log/control.log" 2>/dev/null)"; return; }
	out=$(CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="$uuid=${ceiling_mib}M" "$work/memalloc")
	echo "MPS client: $out"
	got=$(echo "$out" | awk '{print $2}')
	if [ "$got" -le "$ceiling_mib" ] && [ "$got" -ge $((ceiling_mib - limit_slack)) ]; then
		pass "MPS pinned limit $ceiling_mib MiB held ($got MiB)"
	else
		fail "MPS pinned limit $ceiling_mib MiB not enforced ($got MiB)"
	fi
	kill -TERM "$daemon"; wait "$daemon"
	grep -q "set_default_device_pinned_mem_limit $uuid ${ceiling_mib}M" "$work/log/control.log" &&
		pass "MPS control log shows the ceiling command" || fail "MPS control log lacks the ceiling command"
}

dmem_check() {
	[ -f /sys/fs/cgroup/cgroup.controllers ] || { fail "dmem: host is not cgroup v2"; return; }
	go build -o "$work/gpufrac-cdi-hook" ./cmd/gpufrac-cdi-hook || { fail "dmem: cannot build the hook"; return; }
	hard=$((6 << 30)); soft=$((4 << 30))
	cg=/sys/fs/cgroup/gpufrac-gpu-check-$$
	mkdir "$cg" || { fail "dmem: cannot create $cg"; return; }
	# A shell parked in the cgroup plays the container's init process.
	sh -c "echo \$\$ > $cg/cgroup.procs; exec sleep 300" &
	holder=$!
	sleep 0.5
	echo "{\"ociVersion\":\"1.2.0\",\"id\":\"gpu-check\",\"status\":\"created\",\"pid\":$holder,\"bundle\":\"/\"}" |
		"$work/gpufrac-cdi-hook" apply --gpu "$uuid=$soft:$hard"
	if [ $? -ne 0 ]; then fail "dmem: hook failed"; kill $holder; rmdir "$cg"; return; fi
	out=$(sh -c "echo \$\$ > $cg/cgroup.procs; exec $work/memalloc")
	echo "dmem client: $out"
	got=$(echo "$out" | awk '{print $2}')
	if [ "$got" -le $((hard >> 20)) ] && [ "$got" -ge $(((hard >> 20) - limit_slack)) ]; then
		pass "dmem hard limit $((hard >> 20)) MiB held ($got MiB)"
	else
		fail "dmem hard limit $((hard >> 20)) MiB not enforced ($got MiB)"
	fi
	kill $holder; wait $holder 2>/dev/null; rmdir "$cg"
}

mps_check
nvidia-smi -i "$uuid" -c DEFAULT >/dev/null
dmem_check
echo "$fails check(s) failed"
[ "$fails" -eq 0 ]
