#!/usr/bin/env bash
# Runs .ci/run the way docs/design/testing.md ("CI's time budget") measures
# it: a fresh clone of HEAD, as root with GPUFRAC_E2E=required (.ci/run sets
# it as root), with empty GOCACHE, GOMODCACHE and XDG_CACHE_HOME of its own,
# so that Kubernetes, the linters and every module are built or fetched as on
# a new machine. Run it on a quiet machine: the figure is only comparable
# with nothing else running. Usage: hack/cold-ci.sh [work-dir]
# (default: a new directory under /tmp). Prints .ci/run's step lines with
# their start times and the total; the full log is work-dir/ci.log.
set -euo pipefail
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
work=${1:-$(mktemp -d /tmp/gpufrac-cold-ci.XXXXXX)}
mkdir -p "$work"
if [ -e "$work/src" ]; then
	echo "$work/src exists: give a new work-dir" >&2
	exit 1
fi
git clone -q "$repo" "$work/src"
mkdir -p "$work/gocache" "$work/gomodcache" "$work/xdg"
echo "cold .ci/run of $(git -C "$work/src" rev-parse --short HEAD) in $work (log: $work/ci.log)"
start=$(date +%s)
rc=0
(
	cd "$work/src"
	env CI=true GOCACHE="$work/gocache" GOMODCACHE="$work/gomodcache" XDG_CACHE_HOME="$work/xdg" \
		bash .ci/run </dev/null
) >"$work/ci.log" 2>&1 || rc=$?
end=$(date +%s)
grep -E '^== \.ci/run|^==>|done in' "$work/ci.log" || true
echo "rc=$rc total=$((end - start))s ($(((end - start) / 60)) min $(((end - start) % 60)) s)"
# The module cache is read-only as go writes it; let rm -rf remove it later.
chmod -R u+w "$work/gomodcache" 2>/dev/null || true
exit "$rc"
