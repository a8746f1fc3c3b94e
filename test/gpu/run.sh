#!/usr/bin/env bash
# GPU check for gpufrac, for a machine with a real NVIDIA GPU (not CI).
# Run as root from the repository root:  bash test/gpu/run.sh
#
# It leaves the GPU as it found it: no compute-mode or MIG change (the
# daemon's init containers are not run, and the legacy script's compute-mode
# calls go to a shim); the compute mode is compared at the end.
#
# 1. MPS, legacy and (driver r615+) v3: runs the MPS daemon container's
#    script as rendered from templates/mps-control-daemon.yaml (test/gpu/render;
#    no Kubernetes), lets the script apply the plugin's settings (legacy: a
#    pinned ceiling; v3: a namespace on the shared server), and runs memalloc
#    as an MPS client: allocation must stop at the limit, not at the GPU's
#    size. Under v3 the limit must hold without the client's variable, a
#    TimeSlicing client on the main socket gets a server of its own, and the
#    inferred items of docs/design/nvidia/ are checked or printed (FACT).
# 3. Eviction (r615+, cgroup v2 with dmem): two MPS clients in two cgroups
#    with soft/hard limits; a within-soft allocation that does not fit must
#    evict the over-soft client (CUDA_ERROR_MPS_CLIENT_TERMINATED).
#    The daemon's logs must have the lines the MPSClientEvicted and
#    MPSClientTerminated incidents read (inferred formats); a client that
#    raises a fatal GPU exception (test/gpu/fault.c) must end its GPU's
#    other clients (NVIDIA's error containment).
#    Both clients run as gpufrac runs a fraction container's MPS client
#    (tenant.sh, issue 33): a /dev/shm of its own, the daemon's log
#    directory out of sight and, on the main socket, the shared server's
#    subtree covered (docs/design/nvidia/mps-tenants.md T1-T3, inferred).
# 2. dmem (driver r615+, cgroup v2): puts a shell in a fresh cgroup, runs
#    gpufrac-cdi-hook on it as a createRuntime hook would, and runs memalloc
#    there: allocation must stop at the hard limit; then, with memalloc
#    holding its memory, NVML's per-cgroup current use must read as
#    borrowing and at the hard limit (the signals of internal/node/incident).
# 5. The root reservation (r615+, dmem): NVIDIA's "force the root
#    reservation to 0 after every set" as the hook does it (reservation_check).
# 6. The MPS server's own context against the slice's server reserve
#    (server_reserve_check).
# 4. The node's own MPS (docs/design/nvidia/mps-launcher.md D4-D6): where the driver
#    root's MPS binaries are and whether gpufrac's lookup finds them; on
#    r615+, the v3 daemon script through gpufrac-mps-launcher (launcher_check).
#    Needs Go (it builds the launcher) or GPUFRAC_MPS_LAUNCHER=<prebuilt>.
# 5. Driver files (docs/design/nvidia/cdi.md, "The driver in the
#    spec"): libcuda.so.<NVML's driver version> is in a library folder
#    gpufrac's discovery searches, and (inferred) a non-MIG CUDA process
#    needs no /dev/nvidia-caps (driverfiles_check).
# 6. MIG (docs/design/nvidia/mig.md, "MIG instances"), on a node with a
#    configured MIG instance: (inferred) the mig-minors numbering the
#    simulated node uses, and (inferred) that a CUDA process given only one
#    instance's two capability devices allocates on it and, given none,
#    finds no device (mig_check).
# 7. A node MPS server over two GPUs (r615+, a host with two GPUs; issue 35
#    item 4, docs/design/nvidia/mps-multi-gpu.md M1, M6-M8): the server starts
#    and lists both, a client allocates on both, eviction picks its victim
#    per GPU and ends the victim on both (multigpu_check).
# Prints PASS/FAIL per check and exits non-zero on any FAIL.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
work=$(mktemp -d /tmp/gpufrac-gpu.XXXXXX)
fails=0
pass() { echo "PASS: $*"; }
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# cleanup: the daemons quit; $work/driver-root is only ever mounted in the
# launcher check's private mount namespaces, but rm must never walk into a
# bind of the host's root, so it is refused if that is still a mount point.
cleanup() {
	echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/pipe nvidia-cuda-mps-control >/dev/null 2>&1
	[ -S "$work/lpipe/control" ] && CUDA_MPS_PIPE_DIRECTORY=$work/lpipe nvidia-cuda-mps-control -p 3 -q >/dev/null 2>&1
	# shellcheck disable=SC2046 # one PID a word
	kill $(jobs -p) 2>/dev/null; wait
	if mountpoint -q "$work/driver-root" 2>/dev/null; then
		echo "FAIL: $work/driver-root is still mounted; $work left in place"
	else
		rm -rf --one-file-system "$work"
	fi
}
trap cleanup EXIT

command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: not a GPU machine"; exit 2; }
nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version --format=csv
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n1)
gcc -O2 -o "$work/memalloc" test/gpu/memalloc.c -ldl || { echo "cannot build memalloc"; exit 2; }

mode_before=$(nvidia-smi -i "$uuid" --query-gpu=compute_mode --format=csv,noheader)
mig_before=$(nvidia-smi -i "$uuid" --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null)
# The daemon scripts' compute-mode calls (legacy stop) must not reach the GPU.
mkdir -p "$work/shim"
printf '#!/bin/sh\nfor a in "$@"; do [ "$a" = -c ] && { echo "gpu check: compute-mode change skipped: $*" >&2; exit 0; }; done\nexec %s "$@"\n' "$(command -v nvidia-smi)" >"$work/shim/nvidia-smi"
chmod +x "$work/shim/nvidia-smi"
fact() { echo "FACT: $*"; }

ceiling_mib=4096
limit_slack=512 # the context and allocator granularity

# tenant.sh PIPE CMD...: CMD as gpufrac runs a fraction container's MPS
# client (internal/node/cdispec/mounts.go), in a private mount namespace: a
# tmpfs of its own on /dev/shm, not the daemon's; the daemon's log
# directory ($work/log) covered and CUDA_MPS_LOG_DIRECTORY unset; for the
# main socket (PIPE = $work/pipe, the TimeSlicing route) the shared
# server's subtree covered. Exit 97: the namespace could not be set up.
cat >"$work/tenant.sh" <<'TENANT'
#!/bin/sh
PIPE=$1 MAIN=$2 LOG=$3; shift 3
export PIPE MAIN LOG
exec unshare -m --propagation private sh -c '
mount -t tmpfs -o nosuid,nodev,noexec,mode=1777,size=64m gpufrac-shm /dev/shm || exit 97
mount -t tmpfs -o ro,size=4k gpufrac-hidden "$LOG" || exit 97
if [ "$PIPE" = "$MAIN" ] && [ -d "$PIPE/gpufrac" ]; then
	mount -t tmpfs -o ro,size=4k gpufrac-hidden "$PIPE/gpufrac" || exit 97
fi
exec env -u CUDA_MPS_LOG_DIRECTORY CUDA_MPS_PIPE_DIRECTORY="$PIPE" "$@"' sh "$@"
TENANT
chmod +x "$work/tenant.sh"
tenant() { "$work/tenant.sh" "$1" "$work/pipe" "$work/log" "${@:2}"; }

# mps_check VERSION: the daemon container's script and init command,
# rendered by internal/node/mps as the plugin renders them (test/gpu/render), run on
# the host; memalloc, an MPS client, must stop at the claim's limit.
mps_check() {
	version=$1
	command -v nvidia-cuda-mps-control >/dev/null || { fail "MPS $version: nvidia-cuda-mps-control not found"; return; }
	rm -rf "$work/pipe" "$work/log" "$work/config"
	mkdir -p "$work/pipe" "$work/log" "$work/config"
	ns=cgpucheck0000000000
	if [ "$version" = v3 ]; then
		printf '%s %s 100\n' "$ns" "$ceiling_mib" >"$work/config/namespaces"
		go run ./test/gpu/render -part toml -uuid "$uuid" -driver "$driver" >"$work/config/mps.toml" || { fail "MPS v3: cannot render mps.toml"; return; }
		client_pipe=$work/pipe/gpufrac/$ns
	else
		echo "$ceiling_mib" >"$work/config/pinned-mem-limit-mib"
		client_pipe=$work/pipe
	fi
	script=$(go run ./test/gpu/render -version "$version" -uuid "$uuid") || { fail "MPS $version: cannot render the template"; return; }
	# The init container (a compute-mode change) is not run.
	PATH="$work/shim:$PATH" CUDA_VISIBLE_DEVICES=$uuid CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log \
		GPUFRAC_MPS_CONFIG=$work/config sh -c "$script" >"$work/daemon.out" 2>&1 &
	daemon=$!
	for _ in $(seq 1 100); do [ -f "$work/config/ready" ] && break; sleep 0.2; done
	[ -f "$work/config/ready" ] || {
		fail "MPS $version: daemon never became ready; output: $(tail -n5 "$work/daemon.out") log: $(tail -n5 "$work/log/control.log" 2>/dev/null)"
		kill -TERM "$daemon"; wait "$daemon"; return
	}
	out=$(CUDA_MPS_PIPE_DIRECTORY=$client_pipe CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="$uuid=${ceiling_mib}M" "$work/memalloc")
	echo "MPS $version client: $out"
	got=$(echo "$out" | awk '{print $2}')
	if [ -n "$got" ] && [ "$got" -le "$ceiling_mib" ] && [ "$got" -ge $((ceiling_mib - limit_slack)) ]; then
		pass "MPS $version pinned limit $ceiling_mib MiB held ($got MiB)"
	else
		fail "MPS $version pinned limit $ceiling_mib MiB not enforced ($got MiB)"
	fi
	# An entry naming a GPU the client cannot see (ordinal 7: the daemon
	# shows its clients one GPU) drops every pinned limit (dynamo, r615 v3);
	# that legacy limits drop the same way is inferred (docs/enforcement.md).
	out=$(CUDA_MPS_PIPE_DIRECTORY=$client_pipe CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="$uuid=${ceiling_mib}M,7=${ceiling_mib}M" "$work/memalloc" $((2 * ceiling_mib)))
	got=$(echo "$out" | awk '{print $2}')
	if [ -n "$got" ] && [ "$got" -gt "$ceiling_mib" ]; then
		pass "MPS $version: an entry for an invisible GPU in CUDA_MPS_PINNED_DEVICE_MEM_LIMIT drops the pinned limit ($got MiB > $ceiling_mib MiB), as docs/enforcement.md warns"
	else
		fail "MPS $version: an entry for an invisible GPU did not drop the pinned limit ($out): docs/enforcement.md overstates the hazard"
	fi
	if [ "$version" = v3 ]; then
		# The limit must come from the namespace, not the client's variable.
		out=$(CUDA_MPS_PIPE_DIRECTORY=$client_pipe "$work/memalloc")
		got=$(echo "$out" | awk '{print $2}')
		[ -n "$got" ] && [ "$got" -le "$ceiling_mib" ] && pass "MPS v3 namespace limit holds without the client variable ($got MiB)" ||
			fail "MPS v3 namespace limit not enforced without the client variable ($out)"
		# As gpufrac runs the clients (issue 33, T1-T3): an SMSharing client
		# with its namespace's directory, a /dev/shm of its own and no log
		# directory connects and is held to its namespace's limit; a
		# TimeSlicing client on the main socket with the shared server's
		# subtree covered connects and gets a per-UID server.
		out=$(tenant "$client_pipe" "$work/memalloc" 2>&1)
		got=$(echo "$out" | awk '/^allocated /{print $2}')
		[ -n "$got" ] && [ "$got" -le "$ceiling_mib" ] && [ "$got" -ge $((ceiling_mib - limit_slack)) ] &&
			pass "MPS v3: an SMSharing client with a private /dev/shm and no log directory connects and is held to its namespace ($got MiB) (T1, T2)" ||
			fail "MPS v3: an SMSharing client with a private /dev/shm and no log directory: $out (T1, T2: clients may need the daemon's /dev/shm or log)"
		tenant "$work/pipe" "$work/memalloc" 1024 3 >"$work/ts.out" 2>&1 &
		tsc=$!
		sleep 2
		tsservers=$(CUDA_MPS_PIPE_DIRECTORY=$work/pipe nvidia-cuda-mps-control -p 3 server list --format=csv,noheader </dev/null)
		wait $tsc
		out=$(cat "$work/ts.out")
		echo "$out" | grep -q '^allocated 1024 MiB' && echo "$tsservers" | grep -q '^uid_' &&
			pass "MPS v3: a TimeSlicing client with the shared server's subtree covered and a private /dev/shm connects through the main socket to a per-UID server (T1, T3)" ||
			fail "MPS v3: a TimeSlicing client with the shared server's subtree covered: $out; servers: $tsservers (T3: the main-socket route may need <pipe>/gpufrac)"
		# TimeSlicing beside the server: a plain CUDA process in DEFAULT mode.
		out=$(env -u CUDA_MPS_PIPE_DIRECTORY "$work/memalloc" 2>&1 | head -n1)
		echo "$out" | grep -q '^allocated ' && pass "a non-MPS process runs beside the MPS v3 server" ||
			fail "a non-MPS process cannot run beside the MPS v3 server: $out"
		v3_facts
	fi
	kill -TERM "$daemon"; wait "$daemon"
	echo "MPS $version control log:"; tail -n 20 "$work/log/control.log" 2>/dev/null
}

# v3_facts checks, on the running v3 daemon, the items docs/design/nvidia/mps.md
# marks inferred, and prints what NVIDIA does not document (FACT lines).
v3_facts() {
	ctl() { CUDA_MPS_PIPE_DIRECTORY=$work/pipe nvidia-cuda-mps-control -p 3 "$@" </dev/null; }
	# TimeSlicing route (items 17, 18): the main socket gives a per-UID
	# server outside the shared server; two main-socket clients and one
	# namespace client run at once.
	CUDA_MPS_PIPE_DIRECTORY=$work/pipe "$work/memalloc" 1024 4 >/dev/null 2>&1 &
	ts1=$!
	CUDA_MPS_PIPE_DIRECTORY=$work/pipe "$work/memalloc" 1024 4 >/dev/null 2>&1 &
	ts2=$!
	CUDA_MPS_PIPE_DIRECTORY=$client_pipe "$work/memalloc" 1024 4 >/dev/null 2>&1 &
	nsc=$!
	sleep 2
	servers=$(ctl server list --format=csv,noheader)
	clients=$(ctl client list --all --format=csv,noheader)
	clients_ns=$(ctl client list --server=gpufrac --format=csv,noheader)
	wait $ts1 $ts2 $nsc
	fact "server list with two main-socket clients: $(echo "$servers" | tr '\n' ';')"
	fact "client list row shape (item 11): $(echo "$clients" | tr '\n' ';')"
	echo "$servers" | grep -q '^uid_' && pass "a main-socket (TimeSlicing) client gets a per-UID server of its own" ||
		fail "no uid_<uid> server for a main-socket client: $servers"
	# Item 11: the daemon script finds a namespace's clients by the 4th
	# column, the bare name (NVIDIA's example) or "<server>/<ns> (<ctx>)"
	# (KAI's r615 observation); the same match as the script's.
	found=""
	while IFS=, read -r pid srv dev route cmd; do
		case "$route" in "$ns" | "gpufrac/$ns" | "gpufrac/$ns "*) [ "$pid" = "$nsc" ] && found=$route ;; esac
	done <<ROWS
$clients_ns
ROWS
	[ -n "$found" ] && pass "client list names the namespace client (pid $nsc) as the daemon script reads it: '$found'" ||
		fail "client list --server=gpufrac has no row the daemon script matches for pid $nsc in $ns: $(echo "$clients_ns" | tr '\n' ';')"
	# Item 17 (inferred from kai): with default_socket = "off" the two
	# main-socket clients do not share a context: two context ids, read
	# from client list's "(<ctx>)" where it prints one, else from server
	# list's context-ids column of the uid_ server.
	ctxs=$(echo "$clients" | grep '^[0-9]*,uid_' | sed -n 's/.*(\([0-9]*\)).*/\1/p' | sort -u | wc -l)
	[ "$ctxs" -ge 2 ] || ctxs=$(echo "$servers" | grep '^uid_' | cut -d, -f7- | tr -c '0-9\n' '\n' | grep -c '^[0-9][0-9]*$')
	[ "$ctxs" -ge 2 ] && pass "default_socket = off: two main-socket clients hold $ctxs contexts (no context sharing on the per-UID server)" ||
		fail "default_socket = off: two main-socket clients show $ctxs context id(s) (clients: $(echo "$clients" | tr '\n' ';') servers: $(echo "$servers" | tr '\n' ';')); item 17's reading of kai is not confirmed"
	# Value formatting of namespace list (item 9) and the CLI's failures (item 24).
	fact "namespace list: $(ctl namespace list --server=gpufrac --format=csv,noheader | tr '\n' ';')"
	out=$(ctl namespace create gpufrac cold_order 2>&1); rc=$?
	fact "old argument order 'namespace create gpufrac cold_order': exit $rc: $out"
	[ $rc -ne 0 ] || fail "the CLI accepted the old argument order (namespace create <server> <ns>)"
	out=$(ctl namespace create nosrv 2>&1); rc=$?
	fact "namespace create without --server: exit $rc: $out"
	out=$(ctl namespace create "$ns" --server=gpufrac 2>&1); rc=$?
	fact "namespace create of an existing namespace: exit $rc: $out"
	fact "feature describe: $(ctl feature describe | tr '\n' ';')"
	# In -f the v3 daemon stops at the end of its stdin (item 3).
	mkdir -p "$work/pipe2" "$work/log2"
	CUDA_MPS_PIPE_DIRECTORY=$work/pipe2 CUDA_MPS_LOG_DIRECTORY=$work/log2 nvidia-cuda-mps-control -f -p 3 </dev/null >/dev/null 2>&1 &
	f=$!
	sleep 3
	if kill -0 $f 2>/dev/null; then
		fact "a -f -p 3 daemon with stdin at EOF keeps running (item 3 not confirmed; the FIFO is harmless)"
		CUDA_MPS_PIPE_DIRECTORY=$work/pipe2 nvidia-cuda-mps-control -q; wait $f
	else
		fact "a -f -p 3 daemon stops at the end of its stdin (item 3 confirmed)"
	fi
}

# eviction_check (r615+, dmem): A (soft 4 GiB, hard all but 8 GiB) borrows
# most of the GPU; B (soft = hard = 16 GiB), within its soft limit, does
# not fit beside it: the MPS server must evict A (items 20, 21).
eviction_check() {
	[ -f /sys/fs/cgroup/cgroup.controllers ] || { echo "SKIP: eviction: host is not cgroup v2"; return; }
	total=$(nvidia-smi -i "$uuid" --query-gpu=memory.total --format=csv,noheader,nounits)
	rm -rf "$work/pipe" "$work/log" "$work/config"; mkdir -p "$work/pipe" "$work/log" "$work/config"
	: >"$work/config/namespaces"
	go run ./test/gpu/render -part toml -uuid "$uuid" -driver "$driver" >"$work/config/mps.toml"
	script=$(go run ./test/gpu/render -version v3 -uuid "$uuid")
	PATH="$work/shim:$PATH" CUDA_VISIBLE_DEVICES=$uuid CUDA_MPS_PIPE_DIRECTORY=$work/pipe CUDA_MPS_LOG_DIRECTORY=$work/log \
		GPUFRAC_MPS_CONFIG=$work/config sh -c "$script" >"$work/daemon.out" 2>&1 &
	daemon=$!
	for _ in $(seq 1 100); do [ -f "$work/config/ready" ] && break; sleep 0.2; done
	[ -f "$work/config/ready" ] || { fail "eviction: daemon never ready"; kill -TERM $daemon; wait $daemon; return; }
	make -s --no-print-directory build-host BIN="$work" || { fail "eviction: cannot build the hook"; return; }
	limit() { # cgroup soft-MiB hard-MiB: a holder process, then the hook
		mkdir "$1" || return 1
		sh -c "echo \$\$ > $1/cgroup.procs; exec sleep 600" &
		sleep 0.5
		echo "{\"ociVersion\":\"1.2.0\",\"id\":\"gpu-check\",\"status\":\"created\",\"pid\":$!,\"bundle\":\"/\"}" |
			"$work/gpufrac-cdi-hook" apply --gpu "$uuid=$(($2 << 20)):$(($3 << 20))"
	}
	a=/sys/fs/cgroup/gpufrac-gpu-evict-a-$$; b=/sys/fs/cgroup/gpufrac-gpu-evict-b-$$
	limit "$a" 4096 $((total - 8192)) || { fail "eviction: hook for A failed"; }
	limit "$b" 16384 16384 || { fail "eviction: hook for B failed"; }
	# Each as gpufrac runs a fraction's client (tenant.sh): a /dev/shm of
	# its own, no log directory, the shared server's subtree covered.
	sh -c "echo \$\$ > $a/cgroup.procs; exec $work/tenant.sh $work/pipe $work/pipe $work/log $work/memalloc $((total - 12288)) 60" >"$work/a.out" 2>&1 &
	pa=$!
	sleep 5
	outb=$(sh -c "echo \$\$ > $b/cgroup.procs; exec $work/tenant.sh $work/pipe $work/pipe $work/log $work/memalloc 16384")
	wait $pa; rca=$?
	echo "eviction: A: $(tr '\n' ' ' <"$work/a.out") (exit $rca); B: $outb"
	if echo "$outb" | grep -q '^allocated 16384 MiB' && grep -q 'MPS_CLIENT_TERMINATED' "$work/a.out"; then
		pass "eviction: B within its soft limit got its 16 GiB after A, over its soft limit, was terminated (each client with a /dev/shm of its own and no log directory: T1, T2)"
	else
		fail "eviction did not uphold B's soft limit (see above; both clients had a private /dev/shm, no log directory and the shared server's subtree covered, T1-T3: exit 97 means tenant.sh could not set that up)"
	fi
	grep -i evict "$work/log/control.log" "$work/log"/*/server.log 2>/dev/null | tail -n 5 | sed 's/^/FACT: daemon log: /'
	# The MPSClientEvicted incident (internal/node/mps/evictions.go) reads a line
	# naming victim and requester by pid and cgroup (item 23, inferred).
	log_files "eviction"
	if grep -rqE 'memacct: evicted client pid=[0-9]+ cgroup=[^ ]+ device=[^ ]+ for pid [0-9]+' "$work/log" 2>/dev/null; then
		pass "eviction: the daemon's log has the line gpufrac's MPSClientEvicted incident reads"
	else
		fail "eviction: no 'memacct: evicted client pid=... cgroup=... device=... for pid ...' line in the daemon's logs: MPSClientEvicted cannot fire on this driver until internal/node/mps reads the real line (printed above)"
	fi
	fault_check
	kill -TERM $daemon; wait $daemon
	# shellcheck disable=SC2046 # one PID a word
	for cg in "$a" "$b"; do kill $(cat "$cg/cgroup.procs") 2>/dev/null; sleep 0.2; rmdir "$cg"; done
}

# log_files WHAT: every file the daemon wrote under its log directory (the
# memacct audit log's name and place are not documented), last lines each.
log_files() {
	find "$work/log" -type f 2>/dev/null | while read -r f; do
		fact "$1: daemon log file ${f#"$work"/} ($(wc -l <"$f") lines); last: $(tail -n 3 "$f" | tr '\n' '|')"
	done
}

# fault_check (inside eviction_check, with its daemon running): C holds
# memory as an MPS client; F, another client of the GPU, raises a fatal GPU
# exception. NVIDIA (MPS "Memory Protection and Error Containment"): the
# exception reaches every client sharing the GPU, so C's next call fails,
# and the server takes no new client until they have exited. The
# MPSClientTerminated incident reads the daemon's line for each ended
# client (item 29, inferred).
fault_check() {
	gcc -O2 -o "$work/fault" test/gpu/fault.c -ldl || { fail "fault: cannot build test/gpu/fault.c"; return; }
	: >"$work/log/mark"
	sh -c "CUDA_MPS_PIPE_DIRECTORY=$work/pipe exec $work/memalloc 1024 30" >"$work/c.out" 2>&1 &
	pc=$!
	for _ in $(seq 1 50); do grep -q '^allocated ' "$work/c.out" && break; sleep 0.2; done
	outf=$(CUDA_MPS_PIPE_DIRECTORY=$work/pipe "$work/fault" 2>&1); rcf=$?
	# C synchronises once a second, so it may not have exited yet: a client
	# arriving now may be refused (CUDA_ERROR_MPS_SERVER_NOT_READY) until it
	# has (the MPSClientWedged incident, item 29); racy, so a FACT.
	fact "fault: a client right after the fault: $(CUDA_MPS_PIPE_DIRECTORY=$work/pipe "$work/memalloc" 256 2>&1 | tr '\n' ' ')"
	wait $pc; rcc=$?
	echo "fault: F: $outf (exit $rcf); C: $(tr '\n' ' ' <"$work/c.out") (exit $rcc)"
	[ $rcf -eq 0 ] || { fail "fault: the kernel storing to address 0 did not fault ($outf)"; return; }
	if [ $rcc -eq 4 ]; then
		pass "fault: C, another client of the GPU, got F's fatal exception ($(grep '^held: ' "$work/c.out"))"
	else
		fail "fault: C, another client of the GPU, went on after F's fatal exception (error containment not as documented)"
	fi
	find "$work/log" -type f -newer "$work/log/mark" -exec grep -HiE 'fault|exception|terminat|refus|ready|client' {} + 2>/dev/null | tail -n 10 | sed 's/^/FACT: fault: daemon log: /'
	if grep -rqE 'client terminated: pid=[0-9]+ cgroup=[^ ]+ device=[^ ]+ route=[^ ]+: ' "$work/log" 2>/dev/null; then
		pass "fault: the daemon's log has the line gpufrac's MPSClientTerminated incident reads"
	else
		fail "fault: no 'client terminated: pid=... cgroup=... device=... route=...: why' line in the daemon's logs: MPSClientTerminated cannot fire on this driver until internal/node/mps reads the real line (printed above)"
	fi
}

# launcher_check: the daemon as the Pod runs it (docs/design/nvidia/mps-launcher.md
# D4-D6). (a) D4: where nvidia-cuda-mps-control, nvidia-cuda-mps-server,
# nvidia-smi and sh are under each driver root found (/ for a host
# install, /run/nvidia/driver for the GPU Operator's), and whether
# gpufrac's lookup (mpslauncher.FindInRoot, run by test/gpu/findinroot)
# finds them. (b) r615+: for each root with MPS, the v3 daemon script runs
# through gpufrac-mps-launcher as templates/mps-control-daemon.yaml starts
# it (`gpufrac-mps-launcher -- sh -c SCRIPT`, the pipe, log and config
# directories bound and their variables rewritten); D5: the binds are
# there inside the root and a client outside the root gets its limit;
# D6: a namespace create/get/list/delete cycle through the launcher, as
# a probe runs it, and `namespace get ... pipe-directory` against the
# rewritten path. The root is mounted read-only at $work/driver-root in a
# private mount namespace (unshare -m), as the Pod mounts it at
# /driver-root: the launcher refuses / itself.
launcher_check() {
	roots=/
	[ -d /run/nvidia/driver ] && roots="$roots /run/nvidia/driver"
	if ! go build -o "$work/findinroot" ./test/gpu/findinroot; then
		fail "launcher: cannot build test/gpu/findinroot"; return
	fi
	mps_roots=""
	for root in $roots; do
		for bin in nvidia-cuda-mps-control nvidia-cuda-mps-server nvidia-smi sh; do
			# Where it really is: the lookup's directories, then a wider search.
			where=$(find "$root/usr/local/sbin" "$root/usr/local/bin" "$root/usr/sbin" "$root/usr/bin" "$root/sbin" "$root/bin" \
				"$root/usr/lib" "$root/usr/libexec" "$root/opt" -maxdepth 3 -name "$bin" 2>/dev/null | sed 's#//*#/#g' | sort -u | tr '\n' ' ')
			found=$("$work/findinroot" "$root" "$bin"); frc=$?
			fact "D4: driver root $root: $bin at: ${where:-nowhere}; gpufrac's lookup: $found"
			if [ $frc -eq 0 ]; then
				pass "D4: driver root $root: gpufrac's lookup finds $bin (${found#"$bin "} -> $(readlink -f "${found#"$bin "}"))"
			elif [ -n "$where" ]; then
				fail "D4: driver root $root: $bin is at $where but gpufrac's lookup does not find it: $found"
			else
				echo "SKIP: D4: driver root $root: no $bin (MPS binaries missing or not a driver root)"
			fi
		done
		"$work/findinroot" "$root" nvidia-cuda-mps-control nvidia-smi sh >/dev/null && mps_roots="$mps_roots $root"
	done
	if [ "${driver%%.*}" -lt 615 ]; then
		echo "SKIP: D5, D6 (the v3 daemon through gpufrac-mps-launcher): MPS v3 needs driver r615 or later (have $driver)"; return
	fi
	[ -n "$mps_roots" ] || { echo "SKIP: D5, D6: no driver root among ($roots) has nvidia-cuda-mps-control, nvidia-smi and sh"; return; }
	command -v unshare >/dev/null || { echo "SKIP: D5, D6: no unshare (util-linux) to mount the driver root as the Pod does"; return; }
	launcher=${GPUFRAC_MPS_LAUNCHER:-$work/gpufrac-mps-launcher}
	if [ -z "${GPUFRAC_MPS_LAUNCHER:-}" ] && ! CGO_ENABLED=0 go build -o "$launcher" ./cmd/gpufrac-mps-launcher; then
		fail "launcher: cannot build gpufrac-mps-launcher"; return
	fi
	for root in $mps_roots; do launcher_daemon "$root"; done
}

# launcher_daemon ROOT: (b) of launcher_check for one driver root.
launcher_daemon() {
	root=$1
	lns=cgpulaunch000000000
	ins=/tmp/gpufrac-mps/cuda_mps_pipe_directory # the launcher's rewritten CUDA_MPS_PIPE_DIRECTORY (mpslauncher.ScratchDir)
	rm -rf "$work/lpipe" "$work/llog" "$work/lconfig"
	mkdir -p "$work/lpipe" "$work/llog" "$work/lconfig" "$work/driver-root"
	printf '%s %s 100\n' "$lns" "$ceiling_mib" >"$work/lconfig/namespaces"
	go run ./test/gpu/render -part toml -uuid "$uuid" -driver "$driver" >"$work/lconfig/mps.toml" || { fail "D5/D6 ($root): cannot render mps.toml"; return; }
	script=$(go run ./test/gpu/render -version v3 -uuid "$uuid") || { fail "D5/D6 ($root): cannot render the template"; return; }
	# in_pod CMD...: CMD in a fresh private mount namespace with the root
	# mounted read-only at $work/driver-root, as a daemon Pod's container
	# or probe (each its own namespace) sees it, through the launcher.
	# Called only in subshells (&, $(...)): it execs, so the background
	# job's PID ends up the script's shell, which TERM must reach.
	in_pod() {
		exec env CUDA_VISIBLE_DEVICES="$uuid" CUDA_MPS_PIPE_DIRECTORY="$work/lpipe" CUDA_MPS_LOG_DIRECTORY="$work/llog" GPUFRAC_MPS_CONFIG="$work/lconfig" \
			unshare --mount --propagation private sh -c 'mount --rbind "$1" "$2" && mount -o remount,bind,ro "$2" && shift 2 && exec "$@"' \
			in-pod "$root" "$work/driver-root" "$launcher" --driver-root "$work/driver-root" -- "$@"
	}
	in_pod sh -c "$script" >"$work/ldaemon.out" 2>&1 &
	ldaemon=$!
	for _ in $(seq 1 100); do [ -f "$work/lconfig/ready" ] && break; sleep 0.2; done
	if [ ! -f "$work/lconfig/ready" ]; then
		fail "D5/D6 ($root): the daemon through the launcher never became ready; output: $(tail -n5 "$work/ldaemon.out" | tr '\n' '|') log: $(tail -n5 "$work/llog/control.log" 2>/dev/null | tr '\n' '|')"
		kill -TERM "$ldaemon" 2>/dev/null; wait "$ldaemon"; return
	fi
	pass "D4/D5 ($root): the v3 daemon script ran through gpufrac-mps-launcher and applied its namespace (the script itself compares pipe-directory with the rewritten path)"
	# D5: the binds inside the root, as the daemon's shell sees them.
	seen=$(in_pod sh -c 'echo "pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY config=$GPUFRAC_MPS_CONFIG PATH=$PATH"; test -d /proc/1 && echo proc; test -c /dev/nvidiactl && echo dev; test -d /dev/shm && echo shm; test -d /sys/class && echo sys; test -S "$CUDA_MPS_PIPE_DIRECTORY/control" && echo pipe' 2>&1 | tr '\n' ' ')
	fact "D5 ($root): inside the root: $seen"
	case "$seen" in
	"pipe=$ins "*" proc dev shm sys pipe ") pass "D5 ($root): host /proc, /dev, /dev/shm, /sys and the daemon's socket are there inside the root ($seen)" ;;
	*) fail "D5 ($root): the launcher's binds are not all there inside the root: $seen" ;;
	esac
	# D5: a client outside the root (its own path to the same directory)
	# is served by the daemon inside it, within its namespace's limit.
	out=$(CUDA_MPS_PIPE_DIRECTORY=$work/lpipe/gpufrac/$lns "$work/memalloc" 2>&1 | head -n1)
	got=$(echo "$out" | awk '{print $2}')
	if [ -n "$got" ] && [ "$got" -le "$ceiling_mib" ] 2>/dev/null && [ "$got" -ge $((ceiling_mib - limit_slack)) ]; then
		pass "D5 ($root): a client outside the root got the namespace's $ceiling_mib MiB limit from the daemon inside it ($got MiB)"
	else
		fail "D5 ($root): a client at $work/lpipe/gpufrac/$lns was not held to $ceiling_mib MiB by the daemon inside the root: $out"
	fi
	# D6: one create/get/list/delete cycle through the launcher, as a probe.
	ns2=cgpulaunch000000001
	ctl3() { in_pod nvidia-cuda-mps-control -p 3 "$@" </dev/null 2>&1; }
	out=$(ctl3 namespace create "$ns2" --server=gpufrac); rc=$?
	fact "D6 ($root): namespace create $ns2 through the launcher: exit $rc: $out"
	dir=$(ctl3 namespace get "$ns2" gpufrac pipe-directory); rc2=$?
	list=$(ctl3 namespace list --server=gpufrac --format=csv,noheader | tr '\n' ';')
	fact "D6 ($root): namespace get $ns2 gpufrac pipe-directory: exit $rc2: $dir; namespace list: $list"
	if [ $rc -eq 0 ] && [ "$dir" = "$ins/gpufrac/$ns2" ] && [ -S "$work/lpipe/gpufrac/$ns2/control" ]; then
		pass "D6 ($root): the server reports pipe-directory in the daemon's view ($dir = the launcher's $ins/gpufrac/$ns2; on the host $work/lpipe/gpufrac/$ns2/control)"
	else
		fail "D6 ($root): pipe-directory '$dir' (exit $rc2) is not the launcher's rewritten $ins/gpufrac/$ns2 with a control socket at $work/lpipe/gpufrac/$ns2 on the host"
	fi
	echo "$list" | grep -q "$ns2" && pass "D6 ($root): namespace list through the launcher shows $ns2" || fail "D6 ($root): namespace list through the launcher lacks $ns2: $list"
	out=$(ctl3 namespace delete "$ns2" --server=gpufrac --force); rc=$?
	[ $rc -eq 0 ] && pass "D6 ($root): namespace delete $ns2 through the launcher" || fail "D6 ($root): namespace delete $ns2 through the launcher: exit $rc: $out"
	# Stop as the kubelet does: TERM, on which the script quits the daemon
	# (nvidia-cuda-mps-control -p 3 -q) and waits for it.
	kill -TERM "$ldaemon"; wait "$ldaemon"; rc=$?
	if [ $rc -eq 0 ] && [ ! -S "$work/lpipe/control" ]; then
		pass "D5 ($root): the daemon through the launcher quit on TERM (exit 0, no control socket left)"
	else
		fail "D5 ($root): the daemon through the launcher did not stop cleanly: exit $rc, output: $(tail -n3 "$work/ldaemon.out" | tr '\n' '|')"
		CUDA_MPS_PIPE_DIRECTORY=$work/lpipe nvidia-cuda-mps-control -p 3 -q 2>/dev/null
	fi
	# The mounts lived in the launcher's namespaces only.
	if grep -q " $work/driver-root" /proc/self/mountinfo; then
		fail "D7 ($root): $work/driver-root is still mounted in the host's namespace"
	else
		pass "D7 ($root): nothing the launcher mounted is left in the host's mount namespace"
	fi
	echo "D5/D6 ($root) control log:"; tail -n 10 "$work/llog/control.log" 2>/dev/null
}

dmem_check() {
	[ -f /sys/fs/cgroup/cgroup.controllers ] || { fail "dmem: host is not cgroup v2"; return; }
	# As released: without cgo, NVML loaded with dlopen (internal/hook/purenvml).
	make -s --no-print-directory build-host BIN="$work" || { fail "dmem: cannot build the hook"; return; }
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
	# Inferred (docs/design/nvidia/nvml.md, "NVML without cgo"): the
	# real libnvidia-ml.so.1 takes nvmlSetMemoryLimits_v1_t as nvml.h lays
	# it out from a caller without cgo; read back through nvidia-smi.
	got_limits=$(nvidia-smi memory-limits --get -n "$cg" -i "$uuid" 2>&1)
	echo "dmem: limits read back: $got_limits"
	if echo "$got_limits" | grep -q "$((soft >> 20))" && echo "$got_limits" | grep -q "$((hard >> 20))"; then
		pass "hook without cgo: the driver's NVML holds soft $((soft >> 20)) MiB and hard $((hard >> 20)) MiB for $cg"
		echo "FACT: the hook without cgo ran on host glibc $(getconf GNU_LIBC_VERSION 2>/dev/null || echo unknown) (floor: 2.17)"
	else
		fail "hook without cgo: the limits read back are not what it set (see above)"
	fi
	out=$(sh -c "echo \$\$ > $cg/cgroup.procs; exec $work/memalloc")
	echo "dmem client: $out"
	got=$(echo "$out" | awk '{print $2}')
	if [ "$got" -le $((hard >> 20)) ] && [ "$got" -ge $(((hard >> 20) - limit_slack)) ]; then
		pass "dmem hard limit $((hard >> 20)) MiB held ($got MiB)"
	else
		fail "dmem hard limit $((hard >> 20)) MiB not enforced ($got MiB)"
	fi
	incident_check "$cg" "$soft" "$hard"
	kill $holder; wait $holder 2>/dev/null; rmdir "$cg"
}

# reservation_check (r615+, dmem): NVIDIA's deployment model "force the root
# reservation to 0 after every set-limits call" as gpufrac-cdi-hook does it
# (docs/design/nvidia/memory-limits.md, inferred: NVML's set of soft 0 on a
# non-leaf root). A tree root/qos/podA/a and root/qos/podB/b with +dmem all
# the way down: set leaf A (nvidia-smi, no reset), delete A without a reset
# (the leak), set leaf B through the hook (which then forces the root to 0),
# reading dmem.min at each level after each step.
reservation_check() {
	[ -f /sys/fs/cgroup/dmem.capacity ] || { echo "SKIP: root reservation: no dmem controller (misc backend or kernel before 6.14)"; return; }
	go build -o "$work/gpufrac-cdi-hook" ./cmd/gpufrac-cdi-hook || { fail "root reservation: cannot build the hook"; return; }
	bus=$(nvidia-smi -i "$uuid" --query-gpu=pci.bus_id --format=csv,noheader | tr 'A-F' 'a-f'); bus=${bus#0000}
	root=/sys/fs/cgroup/gpufrac-gpu-root-$$
	grep -qw dmem /sys/fs/cgroup/cgroup.subtree_control || echo +dmem >/sys/fs/cgroup/cgroup.subtree_control
	mkdir -p "$root/qos/podA/a" "$root/qos/podB/b" || { fail "root reservation: cannot create $root"; return; }
	for d in "$root" "$root/qos" "$root/qos/podA" "$root/qos/podB"; do echo +dmem >"$d/cgroup.subtree_control" || fail "root reservation: cannot enable +dmem in $d"; done
	minof() { v=$(grep -i "$bus" "$1/dmem.min" 2>/dev/null | awk '{print $2}'); echo "${v:-none}"; }
	levels() { for d in "$root" "$root/qos" "$root/qos/podA" "$root/qos/podA/a" "$root/qos/podB" "$root/qos/podB/b"; do
		[ -d "$d" ] && printf '%s=%s ' "${d#"$root"}" "$(minof "$d")"; done; echo; }
	soft=$((2 << 30))
	nvidia-smi memory-limits --set -n "$root/qos/podA/a" -i "$uuid" --soft-limit 2048 --hard-limit 4096 >/dev/null || { fail "root reservation: setting leaf A"; }
	echo "FACT: dmem.min after set A: root$(levels)"
	[ "$(minof "$root")" = "$soft" ] && pass "root reservation: setting leaf A raised the root's dmem.min to $soft (propagation)" ||
		fail "root reservation: root dmem.min $(minof "$root") after setting leaf A, want $soft"
	rmdir "$root/qos/podA/a" "$root/qos/podA"
	echo "FACT: dmem.min after A deleted without a reset: root$(levels)"
	[ "$(minof "$root/qos")" = "$soft" ] && pass "root reservation: A deleted without a reset leaves $soft in qos (the leak is real)" ||
		fail "root reservation: qos dmem.min $(minof "$root/qos") after A deleted, want the leaked $soft"
	sh -c "echo \$\$ > $root/qos/podB/b/cgroup.procs; exec sleep 300" &
	holder=$!
	sleep 0.5
	echo "{\"ociVersion\":\"1.2.0\",\"id\":\"gpu-check-b\",\"status\":\"created\",\"pid\":$holder,\"bundle\":\"/\"}" |
		"$work/gpufrac-cdi-hook" apply --gpu "$uuid=$soft:$((4 << 30))" || fail "root reservation: hook for leaf B failed"
	echo "FACT: dmem.min after the hook set B and forced the root to 0: root$(levels)"
	if [ "$(minof "$root")" = 0 ] && [ "$(minof "$root/qos/podB/b")" = "$soft" ]; then
		pass "root reservation: after set B the root's dmem.min is 0 and B's leaf holds $soft (NVML soft 0 on a non-leaf works)"
	else
		fail "root reservation: root dmem.min $(minof "$root"), leaf B $(minof "$root/qos/podB/b"); want 0 and $soft"
	fi
	# A cgroup whose parent does not enable +dmem has no dmem files: NVML's
	# set must refuse it as "not found" (inferred code: ERROR_NOT_FOUND),
	# which the simulated driver answers for a DmemUndelegated level.
	mkdir -p "$root/nodmem/c"
	sh -c "echo \$\$ > $root/nodmem/c/cgroup.procs; exec sleep 300" &
	nd=$!
	sleep 0.5
	ndout=$(echo "{\"ociVersion\":\"1.2.0\",\"id\":\"gpu-check-nd\",\"status\":\"created\",\"pid\":$nd,\"bundle\":\"/\"}" |
		"$work/gpufrac-cdi-hook" apply --gpu "$uuid=$soft:$((4 << 30))" 2>&1)
	echo "FACT: the hook on a cgroup without dmem files: $ndout"
	if echo "$ndout" | grep -q ERROR_NOT_FOUND; then
		pass "root reservation: NVML refuses a cgroup without dmem files with NOT_FOUND"
	else
		fail "root reservation: NVML's answer for a cgroup without dmem files is not NOT_FOUND (see FACT); gpusim's DmemUndelegated must answer the same"
	fi
	kill $nd; wait $nd 2>/dev/null; rmdir "$root/nodmem/c" "$root/nodmem"
	rootlim=$(nvidia-smi memory-limits --get -n "$root" -i "$uuid" 2>&1 | tr '\n' ' ')
	echo "FACT: the root's limits after the reset: $rootlim"
	kill $holder; wait $holder 2>/dev/null
	nvidia-smi memory-limits --set -n "$root/qos/podB/b" -i "$uuid" --soft-limit 0 --hard-limit max >/dev/null
	rmdir "$root/qos/podB/b" "$root/qos/podB" "$root/qos" "$root"
}

# server_reserve_check: the MPS server's own context on the GPU, which the
# slice's server reserve (--mps-server-reserve-mib) must cover: the GPU's
# used memory with an MPS control daemon and a server up, less before.
server_reserve_check() {
	before=$(nvidia-smi -i "$uuid" --query-gpu=memory.used --format=csv,noheader,nounits)
	rm -rf "$work/rpipe" "$work/rlog"; mkdir -p "$work/rpipe" "$work/rlog"
	CUDA_VISIBLE_DEVICES=$uuid CUDA_MPS_PIPE_DIRECTORY=$work/rpipe CUDA_MPS_LOG_DIRECTORY=$work/rlog nvidia-cuda-mps-control -d
	# A client makes the control daemon start the server; it allocates 1 MiB and exits.
	CUDA_MPS_PIPE_DIRECTORY=$work/rpipe "$work/memalloc" 1 >/dev/null 2>&1
	sleep 1
	server=$(echo get_server_list | CUDA_MPS_PIPE_DIRECTORY=$work/rpipe nvidia-cuda-mps-control 2>/dev/null | head -n1)
	during=$(nvidia-smi -i "$uuid" --query-gpu=memory.used --format=csv,noheader,nounits)
	ctx=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk -F', ' -v p="$server" '$1 == p {print $2}')
	echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/rpipe nvidia-cuda-mps-control >/dev/null 2>&1
	echo "FACT: MPS server (pid ${server:-?}) context: ${ctx:-unlisted} MiB by nvidia-smi; GPU used ${before} MiB before, ${during} MiB with the server up"
	reserve=$(go run ./test/gpu/render -part server-reserve) || { fail "server reserve: cannot read the default"; return; }
	used=${ctx:-$((during - before))}
	if [ -n "$used" ] && [ "$used" -le "$reserve" ]; then
		pass "server reserve: the MPS server's context ($used MiB) fits the default reserve ($reserve MiB)"
	else
		fail "server reserve: the MPS server's context (${used:-?} MiB) exceeds the default reserve ($reserve MiB): raise --mps-server-reserve-mib's default"
	fi
}

# incident_check CGROUP SOFT HARD: what gpufrac's incidents read (NVML's
# per-cgroup current use, here through nvidia-smi memory-limits --get) for
# a client that allocated until the driver refused: above the soft limit
# (GPUMemoryBorrowing) and within max(256 MiB, 1%) of the hard limit
# (GPUMemoryAtHardLimit, an inferred band: docs/incidents.md).
incident_check() {
	cg=$1; soft_mib=$(($2 >> 20)); hard_mib=$(($3 >> 20))
	sh -c "echo \$\$ > $cg/cgroup.procs; exec $work/memalloc 4194304 20" >"$work/hold.out" &
	client=$!
	for _ in $(seq 1 100); do grep -q '^allocated ' "$work/hold.out" && break; sleep 0.2; done
	limits=$(nvidia-smi memory-limits --get -n "$cg" -i "$uuid" 2>&1)
	kill $client 2>/dev/null; wait $client 2>/dev/null
	echo "incident signal at the wall: $(cat "$work/hold.out"); nvidia-smi: $(echo "$limits" | tr '\n' ' ')"
	used=$(echo "$limits" | sed -n 's/.*current used: *\([0-9]*\) MiB.*/\1/p' | head -n1)
	band=$((hard_mib / 100)); [ "$band" -lt 256 ] && band=256
	if [ -z "$used" ]; then
		fail "incidents: no current use read for $cg"
	elif [ "$used" -gt "$soft_mib" ] && [ $((hard_mib - used)) -le "$band" ]; then
		pass "incidents: $used MiB in use at the wall reads as borrowing (> $soft_mib MiB) and at the hard limit (within $band MiB of $hard_mib MiB)"
	else
		fail "incidents: $used MiB in use at the wall (soft $soft_mib, hard $hard_mib MiB): the at-hard-limit band ($band MiB) does not hold"
	fi
}

# driverfiles_check: the driver version is the suffix of libcuda.so.<v> in
# one of internal/node/driverspec's library folders; memalloc allocates
# 1 GiB with /dev/nvidia-caps hidden (an empty tmpfs over it in a private
# mount namespace), as a gpufrac container has it.
driverfiles_check() {
	found=""
	for d in /usr/lib64 /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib/x86_64-linux-gnu/nvidia/current \
		/lib64 /lib/x86_64-linux-gnu /lib/aarch64-linux-gnu; do
		[ -f "$d/libcuda.so.$driver" ] && { found="$d/libcuda.so.$driver"; break; }
	done
	[ -n "$found" ] && pass "driver files: $found carries NVML's driver version $driver" ||
		fail "driver files: no libcuda.so.$driver in the folders gpufrac searches"
	if [ -d /dev/nvidia-caps ]; then
		out=$(unshare -m sh -c "mount -t tmpfs none /dev/nvidia-caps && exec $work/memalloc 1024" 2>&1)
	else
		out=$("$work/memalloc" 1024 2>&1)
	fi
	case "$out" in
	"allocated 1024 MiB"*) pass "driver files: a CUDA process without /dev/nvidia-caps allocates ($out)" ;;
	*) fail "driver files: a CUDA process without /dev/nvidia-caps fails: $out" ;;
	esac
}

# multigpu_check: docs/design/nvidia/mps-multi-gpu.md M1-M2, M6-M8 (issue 35
# item 4): the node server gpufrac renders with --mps-server-scope=node
# (test/gpu/render -part toml over two GPUs) starts and `server list` shows
# both GPUs (M1, documented); then what the MPS double assumes and NVIDIA
# does not show (its multi-GPU guide ran on one GPU): one client process
# allocates on both GPUs of the server (M6); on cgroup v2 with dmem, an
# eviction picks its victim per GPU: pressure on GPU 1, where the two-GPU
# client T is within its soft limit, evicts O (over its soft limit there)
# and not T, although T is far above its soft limit on GPU 0 (M7); pressure
# on GPU 0 then evicts T, and T's contexts on both GPUs fail (the server
# ends the client process, M8).
multigpu_check() {
	uuids=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n2 | paste -sd, -)
	case $uuids in *,*) ;; *) echo "SKIP: multi-GPU MPS server: this host has one GPU"; return ;; esac
	first=${uuids%%,*} second=${uuids#*,}
	rm -rf "$work/mpipe" "$work/mlog"; mkdir -p "$work/mpipe" "$work/mlog"
	go run ./test/gpu/render -part toml -uuid "$uuids" -driver "$driver" >"$work/multi.toml" || { fail "multi-GPU: cannot render the node server's TOML"; return; }
	# In -f the v3 daemon stops at the end of its stdin (row 3): hold it open.
	rm -f "$work/mstdin"; mkfifo "$work/mstdin"; exec 8<>"$work/mstdin"
	CUDA_VISIBLE_DEVICES=$uuids CUDA_MPS_PIPE_DIRECTORY=$work/mpipe CUDA_MPS_LOG_DIRECTORY=$work/mlog \
		nvidia-cuda-mps-control -f -p 3 -m -a "$work/multi.toml" <&8 >"$work/multi.out" 2>&1 &
	mdaemon=$!
	listed=""
	for _ in $(seq 1 50); do
		listed=$(CUDA_MPS_PIPE_DIRECTORY=$work/mpipe nvidia-cuda-mps-control -p 3 server list gpufrac --format=csv,noheader 2>/dev/null) && [ -n "$listed" ] && break
		sleep 0.2
	done
	fact "multi-GPU MPS server lists: $listed"
	if echo "$listed" | grep -q "$first" && echo "$listed" | grep -q "$second"; then
		pass "multi-GPU MPS server: allowed_devices with two GPUs accepted, both listed (M1)"
	else
		fail "multi-GPU MPS server: allowed_devices = \"$uuids\" not served as documented (M1): $(tail -n3 "$work/multi.out")"
	fi
	gcc -O2 -o "$work/multialloc" test/gpu/multialloc.c -ldl || { fail "multi-GPU: cannot build multialloc"; multigpu_stop; return; }
	out=$(tenant_on "$work/mpipe" "$work/multialloc" 1024 1024 2>&1)
	fact "multi-GPU client: $(echo "$out" | tr '\n' ' ')"
	if echo "$out" | grep -q '^device 0: allocated 1024 MiB' && echo "$out" | grep -q '^device 1: allocated 1024 MiB'; then
		pass "multi-GPU client: one MPS client process allocates on both GPUs of the node server (M6, what the double assumes)"
	else
		fail "multi-GPU client: a client of the two-GPU server could not allocate on both (M6; the double and --mps-server-scope=node assume it): $out"
	fi
	multigpu_eviction
	multigpu_stop
}

# tenant_on PIPE CMD...: CMD as a fraction container's client of the node
# server's main socket (tenant.sh with the node server's directories).
tenant_on() { "$work/tenant.sh" "$1" "$work/mpipe" "$work/mlog" "${@:2}"; }

multigpu_stop() {
	CUDA_MPS_PIPE_DIRECTORY=$work/mpipe nvidia-cuda-mps-control -p 3 -q >/dev/null 2>&1 || kill -TERM "$mdaemon"
	wait "$mdaemon" 2>/dev/null
	exec 8>&-
}

# multigpu_eviction: M7 and M8 (see multigpu_check), with gpufrac-cdi-hook
# setting each client's per-GPU soft and hard limits as Prepare would.
multigpu_eviction() {
	[ -f /sys/fs/cgroup/cgroup.controllers ] || { echo "SKIP: multi-GPU eviction: host is not cgroup v2"; return; }
	make -s --no-print-directory build-host BIN="$work" || { fail "multi-GPU eviction: cannot build the hook"; return; }
	t0=$(nvidia-smi -i "$first" --query-gpu=memory.total --format=csv,noheader,nounits)
	t1=$(nvidia-smi -i "$second" --query-gpu=memory.total --format=csv,noheader,nounits)
	mlimit() { # cgroup then one "uuid soft-MiB hard-MiB" triple per GPU
		cg=$1; shift
		mkdir "$cg" || return 1
		sh -c "echo \$\$ > $cg/cgroup.procs; exec sleep 600" &
		sleep 0.5
		args=()
		while [ $# -ge 3 ]; do args+=(--gpu "$1=$(($2 << 20)):$(($3 << 20))"); shift 3; done
		echo "{\"ociVersion\":\"1.2.0\",\"id\":\"gpu-check\",\"status\":\"created\",\"pid\":$!,\"bundle\":\"/\"}" |
			"$work/gpufrac-cdi-hook" apply "${args[@]}"
	}
	in_cg() { cg=$1; shift; sh -c "echo \$\$ > $cg/cgroup.procs; exec $work/tenant.sh $work/mpipe $work/mpipe $work/mlog $*"; }
	T=/sys/fs/cgroup/gpufrac-gpu-multi-t-$$ O=/sys/fs/cgroup/gpufrac-gpu-multi-o-$$
	N=/sys/fs/cgroup/gpufrac-gpu-multi-n-$$ M=/sys/fs/cgroup/gpufrac-gpu-multi-m-$$
	# T: soft 4 GiB on each GPU; far above it on GPU 0, within it on GPU 1.
	mlimit "$T" "$first" 4096 $((t0 - 8192)) "$second" 4096 8192 || fail "multi-GPU eviction: hook for T failed"
	mlimit "$O" "$second" 4096 $((t1 - 8192)) || fail "multi-GPU eviction: hook for O failed"
	mlimit "$N" "$second" 16384 16384 || fail "multi-GPU eviction: hook for N failed"
	mlimit "$M" "$first" 16384 16384 || fail "multi-GPU eviction: hook for M failed"
	in_cg "$T" "$work/multialloc" $((t0 - 12288)) 2048 90 >"$work/t.out" 2>&1 &
	pt=$!
	sleep 5
	in_cg "$O" "$work/multialloc" 0 $((t1 - 12288)) 60 >"$work/o.out" 2>&1 &
	po=$!
	sleep 5
	outn=$(in_cg "$N" "$work/multialloc" 0 16384 2>&1)
	sleep 2
	wait $po
	if grep -q 'MPS_CLIENT_TERMINATED' "$work/o.out" && kill -0 $pt 2>/dev/null && ! grep -q '^held:' "$work/t.out"; then
		pass "multi-GPU eviction: pressure on GPU 1 evicted O (over its soft limit there), not the two-GPU client T, which is over its soft limit only on GPU 0 (M7)"
	else
		fail "multi-GPU eviction: pressure on GPU 1 did not evict per device (M7; the double assumes it): N: $(echo "$outn" | tr '\n' ' '); O: $(tr '\n' ' ' <"$work/o.out"); T: $(tr '\n' ' ' <"$work/t.out")"
	fi
	outm=$(in_cg "$M" "$work/multialloc" 16384 0 2>&1)
	wait $pt
	fact "multi-GPU eviction: M: $(echo "$outm" | tr '\n' ' '); T: $(tr '\n' ' ' <"$work/t.out")"
	if grep -q '^held: device 0: CUDA_ERROR_MPS_CLIENT_TERMINATED' "$work/t.out" && grep -q '^held: device 1: CUDA_ERROR_MPS_CLIENT_TERMINATED' "$work/t.out"; then
		pass "multi-GPU eviction: T, evicted on GPU 0, lost both GPUs (M8, what the double assumes)"
	else
		fail "multi-GPU eviction: T's contexts after its eviction on GPU 0 are not both terminated (M8; the double ends the whole client): $(tr '\n' ' ' <"$work/t.out")"
	fi
	grep -ih evict "$work/mlog/control.log" "$work/mlog"/*/server.log 2>/dev/null | tail -n 6 | sed 's/^/FACT: multi-GPU daemon log: /'
	# shellcheck disable=SC2046 # one PID a word
	for cg in "$T" "$O" "$N" "$M"; do kill $(cat "$cg/cgroup.procs") 2>/dev/null; sleep 0.2; rmdir "$cg"; done
}

# mig_check: see 6. above. Skips where no MIG instance is configured.
mig_check() {
	minors=/proc/driver/nvidia-caps/mig-minors
	line=$(nvidia-smi mig -lci 2>/dev/null | awk '$4 == "MIG" {print $2, $3, $7; exit}')
	if [ -z "$line" ] || [ ! -r "$minors" ]; then
		echo "SKIP: MIG checks need a GPU with MIG mode on and a compute instance (nvidia-smi mig -cgi ... -C)"
		return
	fi
	bad=$(awk '{ if (split($1, p, "/") == 3) { g = substr(p[1], 4); gi = substr(p[2], 3); want = 3 + 135 * g + 9 * gi }
		else if (split($1, p, "/") == 4) { g = substr(p[1], 4); gi = substr(p[2], 3); ci = substr(p[3], 3); want = 3 + 135 * g + 9 * gi + 1 + ci }
		else next; if ($2 != want) print $0 " (want " want ")" }' "$minors" | head -n3)
	[ -z "$bad" ] && pass "MIG: every mig-minors line follows 3 + 135*gpu + 9*gi (+1+ci), the simulated node's numbering" ||
		fail "MIG: mig-minors differs from the simulated numbering: $bad"
	set -- $line
	gpu=$1 gi=$2 ci=$3
	gim=$(awk -v k="gpu$gpu/gi$gi/access" '$1 == k {print $2}' "$minors")
	cim=$(awk -v k="gpu$gpu/gi$gi/ci$ci/access" '$1 == k {print $2}' "$minors")
	major=$(awk '$2 == "nvidia-caps" {print $1; exit}' /proc/devices)
	only=$(unshare -m sh -c "mount -t tmpfs none /dev/nvidia-caps && mknod /dev/nvidia-caps/nvidia-cap$gim c $major $gim && mknod /dev/nvidia-caps/nvidia-cap$cim c $major $cim && exec env -u CUDA_VISIBLE_DEVICES $work/memalloc 256" 2>&1)
	case "$only" in
	"allocated 256 MiB"*) pass "MIG: a CUDA process with only GPU $gpu instance $gi/$ci's capability devices allocates ($only)" ;;
	*) fail "MIG: a CUDA process with only GPU $gpu instance $gi/$ci's capability devices (nvidia-cap$gim, nvidia-cap$cim) fails: $only" ;;
	esac
	none=$(unshare -m sh -c "mount -t tmpfs none /dev/nvidia-caps && exec env -u CUDA_VISIBLE_DEVICES $work/memalloc 256" 2>&1)
	case "$none" in
	"allocated 256 MiB"*) nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader | grep -qv Enabled &&
		pass "MIG: without capability devices the process got a non-MIG GPU ($none)" ||
		fail "MIG: a CUDA process without capability devices allocated on a MIG-only node: $none" ;;
	*) pass "MIG: a CUDA process without capability devices reaches no MIG instance ($none)" ;;
	esac
}

driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
driverfiles_check
mig_check
mps_check legacy
if [ "${driver%%.*}" -ge 615 ]; then
	mps_check v3
	eviction_check
	multigpu_check
else
	echo "SKIP: MPS v3 needs driver r615 or later (have $driver)"
fi
launcher_check
echo "SKIP: r620 items (cgroup/cgroup_depth routing, r620 TOML keys) need an r620 driver"
dmem_check
if [ "${driver%%.*}" -ge 615 ]; then
	reservation_check
fi
server_reserve_check
mode_after=$(nvidia-smi -i "$uuid" --query-gpu=compute_mode --format=csv,noheader)
mig_after=$(nvidia-smi -i "$uuid" --query-gpu=mig.mode.current --format=csv,noheader 2>/dev/null)
[ "$mode_before" = "$mode_after" ] && [ "$mig_before" = "$mig_after" ] && pass "the GPU's compute mode ($mode_after) and MIG mode are as found" ||
	fail "the GPU's settings changed: compute mode $mode_before -> $mode_after, MIG $mig_before -> $mig_after"
echo "$fails check(s) failed"
[ "$fails" -eq 0 ]
